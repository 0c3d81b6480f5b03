"""DeepSpeed ZeRO stages 1, 2 and 3 (`distributed.backend: deepspeed`), one `deepspeed.initialize` engine per role.

Called directly rather than through Accelerate, so CPU (gloo) and GPU (NCCL) share one code path with the
accumulation set per micro-batch. Under ZeRO-3 every rank gathers the weights once per generation phase and the
update phase keeps ZeRO's per-forward gathers. A bfloat16 role is DeepSpeed's bf16 engine (`engine_config`), an
offloaded optimizer DeepSpeed's CPU Adam (`cpu_adam`). Checkpoints hold the same files as DDP and FSDP2. float16
roles and LoRA on several ranks are refused (`check_roles`). The mechanism is in docs/SCALE.md ("DeepSpeed ZeRO").
"""

from __future__ import annotations

import contextlib
import os

import torch

from pasodoble.errors import ConfigError
from pasodoble.rollout.base import RolloutEngine
from pasodoble.rollout.weights import FullWeights
from pasodoble.scale.sharding.base import Sharding, _tie, nested_once, refuse_lora


def import_deepspeed():
    """deepspeed, with its CPU accelerator selected when no GPU is visible (it would probe for CUDA)."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
    except ImportError as e:
        from pasodoble.errors import ConfigError

        raise ConfigError(
            "distributed.backend",
            f"deepspeed is not installed ({e}); install the extra: pip install 'pasodoble[deepspeed]'",
        ) from None

    return deepspeed


def engine_config(
    zero_stage: int, offload_optimizer: bool, max_grad_norm: float | None, *, bf16: bool = False
) -> dict:
    """DeepSpeed's config for one role: accumulation is driven per micro-batch by `accumulate`, so 1 here.

    `bf16` (a bfloat16 role): DeepSpeed's own mixed precision, the module in bfloat16 and float32 master weights
    and AdamW states in its partitions; gradients are reduced in float32 (`communication_data_type`) and, where
    DeepSpeed supports it (ZeRO-1 without offload: its BF16_Optimizer), accumulated in float32 too. ZeRO-2 and 3
    accumulate in their bfloat16 gradient partitions, DeepSpeed's only path there."""
    zero: dict = {"stage": zero_stage}
    if (
        zero_stage == 3
    ):  # every parameter partitioned (DeepSpeed's default keeps small ones whole on each rank)
        zero["stage3_param_persistence_threshold"] = 0
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": float(max_grad_norm) if max_grad_norm is not None else 0.0,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        # offload steps DeepSpeed's compiled CPU Adam on the CPU partitions (`cpu_adam`); DeepSpeed checks it
        "zero_force_ds_cpu_optimizer": offload_optimizer,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if bf16:
        config["bf16"] = {"enabled": True}
        config["communication_data_type"] = "fp32"
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    return config


class DeepSpeedZero(Sharding):
    """One DeepSpeed ZeRO-1/2/3 engine per trainable role; see the module docstring."""

    backend = "deepspeed"

    def __init__(self, world_size: int, *, zero_stage: int = 2, offload_optimizer: bool = False):
        self.grad_scale = float(world_size)  # ZeRO averages gradients over ranks
        self.zero_stage, self.offload_optimizer = zero_stage, offload_optimizer
        self.head_outside_forward = zero_stage < 3
        self.deepspeed = import_deepspeed()
        self._engines: dict[int, object] = {}  # id(module) and id(engine) -> engine
        # id(engine) -> the optimizer's parameters in their order (DeepSpeed swaps them for flat partitions)
        self._params: dict[int, list[torch.nn.Parameter]] = {}
        self._active = None  # the engine whose micro-batch is inside `accumulate`
        self._depth: dict[int, int] = {}  # id(engine) -> nesting depth of `gathered` (ZeRO-3)
        self._gathers: dict[int, object] = {}  # id(engine) -> the open GatheredParameters (ZeRO-3)
        self._start_hooks: dict[int, object] = {}  # id(engine) -> ZeRO-3's removed start-of-forward hook
        self._group_keys: dict[int, set[str]] = {}  # id(engine) -> the group keys a checkpoint holds

    def prepare(
        self,
        name: str,
        model: torch.nn.Module,
        optimizer,
        *,
        max_grad_norm: float | None = None,
        compute_dtype: torch.dtype | None = None,
    ):
        if len(optimizer.param_groups) != 1:  # the checkpoint layout below indexes one group
            raise ValueError(f"{name}: DeepSpeedZero expects one parameter group")
        params = list(optimizer.param_groups[0]["params"])
        # what a checkpoint's groups hold: torch's AdamW's and its scheduler's keys, not CPU Adam's own
        group_keys = set(optimizer.param_groups[0]) - {"params"}
        if self.offload_optimizer:
            optimizer = cpu_adam(optimizer)
        bf16 = compute_dtype == torch.bfloat16
        config = engine_config(self.zero_stage, self.offload_optimizer, max_grad_norm, bf16=bf16)
        engine, *_ = self.deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self._engines[id(model)] = self._engines[id(engine)] = engine
        self._group_keys[id(engine)] = group_keys
        self._params[id(engine)] = params
        # The role zeroes gradients through DeepSpeed's optimizer (torch's would drop its partition buffers);
        # the scheduler stays on torch's, whose parameter groups DeepSpeed shares.
        return engine, engine.optimizer

    def _engine(self, model: torch.nn.Module):
        return self._engines.get(id(model))

    def _partitioned(self, model: torch.nn.Module):
        """The role's engine when its weights are partitioned (ZeRO-3), else None."""
        engine = self._engine(model)
        return engine if engine is not None and self.zero_stage == 3 else None

    @contextlib.contextmanager
    def gathered(self, model: torch.nn.Module):
        """ZeRO-3: every rank enters (one all-gather of every parameter); inside, the full weights are in the
        module and ZeRO-3's forward/backward hooks are removed, so no forward communicates (ranks run different
        numbers of them). On exit the hooks come back and the weights are partitioned again. Nested entries
        gather once. ZeRO-1/2: the module holds the full weights, nothing to do. The hooks are DeepSpeed
        internals (checked against the pinned 0.19.8), as in TRL's generation under ZeRO-3."""
        engine = self._partitioned(model)
        if engine is None:
            yield
            return
        with nested_once(
            self._depth, id(engine), lambda: self._gather(engine), lambda: self._release(engine)
        ):
            yield

    def _gather(self, engine) -> None:
        gather = self.deepspeed.zero.GatheredParameters(list(engine.module.parameters()))
        gather.__enter__()
        self._gathers[id(engine)] = gather
        offload = _offload(engine)
        # The start-of-forward hook checks the forward trace against the other ranks (a collective) too.
        self._start_hooks[id(engine)] = offload.module._forward_pre_hooks[offload.fwd_pre_hook.id]
        offload.fwd_pre_hook.remove()
        for hook in offload.forward_hooks + offload.backward_hooks:
            hook.remove()
        offload.forward_hooks, offload.backward_hooks = [], []
        for param in engine.module.parameters():
            param.ds_active_sub_modules.clear()

    def _release(self, engine) -> None:
        offload = _offload(engine)
        offload.fwd_pre_hook = offload.module.register_forward_pre_hook(self._start_hooks.pop(id(engine)))
        offload._register_deepspeed_module(offload.module)
        self._gathers.pop(id(engine)).__exit__(None, None, None)

    def updating(self, model: torch.nn.Module):
        """ZeRO-3's update keeps its hooks (each forward gathers, each backward partitions the gradients; every
        rank runs every micro-batch, so the collectives match): no phase-wide gather."""
        if self._partitioned(model) is not None:
            return contextlib.nullcontext()
        return self.gathered(model)

    def sync_engine(self, model: torch.nn.Module, engine: RolloutEngine) -> None:
        """ZeRO-3: an engine with its own copy of the weights (vLLM) gets the full weights, gathered on every
        rank; an engine that runs the module reads it inside `gathered`."""
        if self._partitioned(model) is None or not engine.copies_weights:
            return engine.update_weights(model)
        engine.update_weights(FullWeights(model, self._full_weights(self._engine(model))))

    def _full_weights(self, engine) -> dict:
        """The module's full state dict (under ZeRO-3 gathered: a collective, every rank calls it)."""
        module = engine.module
        if self.zero_stage != 3:  # every rank's module holds the full weights
            return _tie(module, {k: v.detach().cpu() for k, v in module.state_dict().items()})
        # copies: the gathered tensors are freed when the weights are partitioned again
        if self._depth.get(id(engine), 0) > 0:  # inside `gathered`: already full
            return _tie(module, {k: v.detach().cpu().clone() for k, v in module.state_dict().items()})
        with self.deepspeed.zero.GatheredParameters(list(module.parameters())):
            return _tie(module, {k: v.detach().cpu().clone() for k, v in module.state_dict().items()})

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module, last: bool):
        engine = self._engine(model)
        engine.set_gradient_accumulation_boundary(last)
        self._active = engine
        try:
            yield
        finally:
            self._active = None

    def backward(self, loss: torch.Tensor) -> None:
        self._active.backward(loss, scale_wrt_gas=False)

    def step(self, model: torch.nn.Module, optimizer, scaler, max_norm: float) -> float:
        """Reduction, clipping (configured at `prepare`) and AdamW, all DeepSpeed's; the pre-clip global norm."""
        engine = self._engine(model)
        engine.step()
        norm = engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def _named(self, model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
        engine = self._engine(model)
        names = {id(p): n for n, p in engine.module.named_parameters()}
        return [(names[id(p)], p) for p in self._params[id(engine)]]

    def _link_states(self, engine) -> None:
        """ZeRO links each parameter's fragment to its AdamW state at the first step; after a load (the state
        made here) and before that step, link them now so the state can be read and written."""
        opt = engine.optimizer
        if hasattr(opt, "_lazy_init_hp_params_optimizer_state") and _stepped(engine):
            opt._hp_optimizer_states_linked = False
            opt._lazy_init_hp_params_optimizer_state()

    def full_state(self, model: torch.nn.Module, optimizer, *, all_ranks: bool = False) -> dict | None:
        """Full weights (every rank's module holds them) and the AdamW state gathered from the partitions (a
        collective; every rank gets it), keyed by parameter index as `Optimizer.state_dict()` of an unsharded
        model."""
        from deepspeed.utils import safe_get_full_optimizer_state

        engine = self._engine(model)
        if engine is None:  # a frozen role: never wrapped
            return None
        out = {
            "model": self._master_weights(engine) if engine.bfloat16_enabled() else self._full_weights(engine)
        }
        if optimizer is None:
            return out
        adamw = (
            engine.optimizer.optimizer
        )  # torch's AdamW (CPU Adam when offloaded) on this rank's partitions
        named = self._named(model)
        keys = self._group_keys[id(engine)]
        groups = [{k: v for k, v in g.items() if k in keys} for g in adamw.param_groups]
        groups[0]["params"] = list(range(len(named)))
        state: dict = {}
        if _stepped(engine):  # before any step there is nothing to gather: the hyperparameters only
            self._link_states(engine)
            step = next(adamw.state[p]["step"] for p in _flats(engine) if "step" in adamw.state.get(p, {}))
            for i, (_, param) in enumerate(named):
                state[i] = {"step": torch.as_tensor(step, dtype=torch.float32).detach().cpu().clone()}
                for key in ("exp_avg", "exp_avg_sq"):
                    state[i][key] = safe_get_full_optimizer_state(param, key).detach().cpu()
        out["optimizer"] = {"state": state, "param_groups": groups}
        return out

    def _master_weights(self, engine) -> dict:
        """A bf16 engine's checkpoint weights: its float32 master copy (what AdamW steps; the module holds their
        bfloat16 rounding), so a resume continues exactly as under the other backends. A collective: every rank
        calls it."""
        from deepspeed.utils import safe_get_full_fp32_param

        out = {k: v.float() for k, v in self._full_weights(engine).items()}
        for name, param in self._named(engine.module):
            out[name] = safe_get_full_fp32_param(param).detach().cpu()
        return _tie(engine.module, out)

    def load_weights(self, model: torch.nn.Module, state_dict: dict) -> None:
        """Full weights into the module and into DeepSpeed's float32 master partitions (each rank its slice)."""
        from deepspeed.utils import safe_set_full_fp32_param

        engine = self._engine(model)
        if engine is None:
            return super().load_weights(model, state_dict)
        if self.zero_stage == 3:  # the module's partitions too: generation reads them before the next step
            with self.deepspeed.zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=0):
                engine.module.load_state_dict(state_dict)
        else:
            engine.module.load_state_dict(state_dict)
        for name, param in self._named(model):
            safe_set_full_fp32_param(param, state_dict[name].to(param.device, torch.float32))

    def load_optimizer(self, model: torch.nn.Module, optimizer, state: dict) -> None:
        """An index-keyed full AdamW state (what every backend saves) into this rank's partitions."""
        from deepspeed.utils import safe_set_full_optimizer_state

        engine = self._engine(model)
        adamw = engine.optimizer.optimizer
        for group, saved in zip(adamw.param_groups, state["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})
        if not state["state"]:  # saved before the first step: only the hyperparameters
            return
        step = state["state"][0]["step"]
        for flat in _flats(engine):  # the flat partitions: the state AdamW makes at its first step
            if not adamw.state.get(flat):
                zeros = torch.zeros_like(flat, memory_format=torch.preserve_format)
                adamw.state[flat] = {"exp_avg": zeros, "exp_avg_sq": zeros.clone()}
            adamw.state[flat]["step"] = _step_for(adamw, step)
        self._link_states(engine)
        for i, (_, param) in enumerate(self._named(model)):
            for key in ("exp_avg", "exp_avg_sq"):
                safe_set_full_optimizer_state(param, state["state"][i][key].to(param.device), key)


def cpu_adam(adamw: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """DeepSpeed's CPU Adam in place of torch's AdamW for an offloaded optimizer (DeepSpeed's offload expects it; its
    vectorised step is DeepSpeed's measured gain over torch's on the CPU partitions). It takes torch's parameter
    groups themselves, so the scheduler built on torch's optimizer still sets the learning rate it steps with. The
    op is compiled on first use (a C++ compiler and ninja; minutes, then cached)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    d = adamw.defaults
    return DeepSpeedCPUAdam(
        adamw.param_groups,
        lr=d["lr"],
        betas=d["betas"],
        eps=d["eps"],
        weight_decay=d["weight_decay"],
        adamw_mode=True,  # decoupled weight decay, as torch's AdamW
    )


def _step_for(optimizer, step: torch.Tensor):
    """A checkpoint's step count (a float32 tensor, torch's) as `optimizer` keeps it: CPU Adam counts in an int."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    if isinstance(optimizer, DeepSpeedCPUAdam):
        return int(step)
    return step.detach().clone().to(torch.float32).cpu()


def _offload(engine):
    """ZeRO-3's parameter coordinator, which holds the module hooks."""
    return getattr(engine.optimizer, "parameter_offload", engine.optimizer)


def _flats(engine) -> list[torch.Tensor]:
    """The float32 partitions AdamW steps (ZeRO-3 lists them in AdamW's groups only during its step)."""
    if hasattr(engine.optimizer, "fp32_partitioned_groups_flat"):
        return list(engine.optimizer.fp32_partitioned_groups_flat)
    return [p for g in engine.optimizer.optimizer.param_groups for p in g["params"]]


def _stepped(engine) -> bool:
    return any(engine.optimizer.optimizer.state.get(p) for p in _flats(engine))


def check_roles(backend: str, world_size: int, roles: dict) -> None:
    """Refuse, before any model loads, the settings DeepSpeed on several ranks does not train with."""
    if backend != "deepspeed" or world_size <= 1:
        return
    why = (
        "a resumed adapter is loaded into the module, not into DeepSpeed's float32 master copy, "
        "so the next step would undo it"
    )
    refuse_lora(backend, world_size, roles, why)
    for name, cfg in roles.items():
        if cfg.trainable and cfg.dtype == "float16":
            raise ConfigError(
                f"{name}.dtype",
                "float16 with distributed.backend=deepspeed is not supported (the role's loss scaler and "
                "DeepSpeed's would both act); use bfloat16 or float32",
            )
