"""How a role's model and optimizer are wrapped for training on several ranks (Accelerate: DDP, FSDP2, DeepSpeed).

What: a `Role` trains through one of these objects, built where the roles are built (never inside the step):
  `Unsharded`     one process: the model as is, `loss.backward()`, torch's gradient clipping.
  `Accelerated`   `accelerate.Accelerator.prepare(model, optimizer)`, one role at a time: DDP on CPU (gloo) or
                  GPU (NCCL); FSDP2 (`fsdp_version=2`) and DeepSpeed ZeRO on GPU. Each role gets its own prepare
                  call (FSDP2 takes one model and its optimizer at a time); DeepSpeed gets one `Accelerator` holding
                  a dict of two plugins, the active one selected before each role's prepare (Accelerate raises on
                  one prepare with two DeepSpeed models).
The role asks for `accumulate(model, last)` (DDP skips the gradient all-reduce except on the last micro-batch),
`backward(loss)` and `clip_grad_norm(model, max_norm)`; `grad_scale` is the factor that turns the engine's
gradient AVERAGE over ranks into the SUM the full-batch loss needs (each rank's loss already carries its share's
weight in the full batch).

Why: the sharding engine is chosen in config (`distributed.backend`); the loop and the role code never test which
one they have.

Departures: none from the method. What is exercised where: DDP on CPU/gloo in the distributed tests (the whole
loop). Accelerate only selects FSDP for GPU-type runs (on MULTI_CPU it silently prepares DDP) and DeepSpeed is
not a dependency, so `pasodoble.layout` refuses both without a GPU and covers their memory in layout tests;
`FullyShard` applies torch's FSDP2 directly and its update is tested on CPU/gloo against the one-rank update.
The loop refuses FSDP2 and DeepSpeed on several ranks (`NOT_WIRED` says what is missing).
"""

from __future__ import annotations

import contextlib

import torch


class Unsharded:
    """One process: plain PyTorch."""

    grad_scale = 1.0

    def prepare(self, name: str, model: torch.nn.Module, optimizer):
        return model, optimizer

    def accumulate(self, model: torch.nn.Module, last: bool):
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        params = [p for p in model.parameters() if p.grad is not None]
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0


class Accelerated:
    """Both roles prepared by Accelerate in the same processes, one `prepare` call per role."""

    def __init__(
        self, backend: str, world_size: int, *, zero_stage: int = 2, offload_optimizer: bool = False
    ):
        from accelerate import Accelerator

        self.backend, self.world_size = backend, world_size
        self.grad_scale = float(world_size)  # DDP / FSDP / ZeRO average gradients over ranks
        kwargs: dict = {"cpu": not torch.cuda.is_available()}
        if backend == "fsdp2":
            from accelerate import FullyShardedDataParallelPlugin

            kwargs["fsdp_plugin"] = FullyShardedDataParallelPlugin(
                fsdp_version=2,
                reshard_after_forward=True,
                cpu_offload=offload_optimizer,
                state_dict_type="FULL_STATE_DICT",
            )
        elif backend == "deepspeed":
            from accelerate import DeepSpeedPlugin

            def plugin() -> DeepSpeedPlugin:
                return DeepSpeedPlugin(
                    zero_stage=zero_stage,
                    offload_optimizer_device="cpu" if offload_optimizer else "none",
                    gradient_accumulation_steps=1,
                    gradient_clipping=None,
                )

            kwargs["deepspeed_plugins"] = {"proposer": plugin(), "solver": plugin()}
        self.accelerator = Accelerator(**kwargs)

    def prepare(self, name: str, model: torch.nn.Module, optimizer):
        if self.backend == "deepspeed":
            self.accelerator.state.select_deepspeed_plugin(name)
        return self.accelerator.prepare(model, optimizer)

    def accumulate(self, model: torch.nn.Module, last: bool):
        return contextlib.nullcontext() if last else self.accelerator.no_sync(model)

    def backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss)

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        norm = self.accelerator.clip_grad_norm_(model.parameters(), max_norm)
        return float(norm) if norm is not None else 0.0


class FullyShard(Unsharded):
    """torch's FSDP2 (`fully_shard`, the engine Accelerate drives for `fsdp_version=2`), applied directly: each
    decoder layer and then the whole model, over all ranks. Used where Accelerate will not select FSDP (CPU runs);
    the update path only: see `NOT_WIRED` for what the loop still lacks."""

    def __init__(self, world_size: int, *, offload: bool = False):
        from torch.distributed.device_mesh import init_device_mesh

        self.grad_scale = float(world_size)  # FSDP2's reduce-scatter averages over ranks
        self.offload = offload
        self.mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world_size,))

    def prepare(self, name: str, model: torch.nn.Module, optimizer):
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        kwargs = {"mesh": self.mesh, **({"offload_policy": CPUOffloadPolicy()} if self.offload else {})}
        for layer in getattr(getattr(model, "model", model), "layers", []):
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        # fully_shard replaced the parameters by sharded ones: point the optimizer (and its scheduler) at them.
        optimizer.param_groups[0]["params"] = [p for p in model.parameters() if p.requires_grad]
        return model, optimizer

    def accumulate(self, model: torch.nn.Module, last: bool):
        model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


NOT_WIRED = {
    "fsdp2": "its update path runs (FullyShard, tested on CPU/gloo), but the loop does not yet gather full weights "
    "around each rank's generation phase (FSDP2 all-gathers in every forward, and ranks run different numbers of "
    "forwards), nor full state dicts for checkpoints",
    "deepspeed": "Accelerate's DeepSpeed wrapper steps the optimizer inside backward() unless its gradient "
    "accumulation is configured per update, which the per-micro-batch loss weighting does not do yet",
}


def build_sharding(backend: str, world_size: int, *, zero_stage: int = 2, offload_optimizer: bool = False):
    """`Unsharded` on one rank, else Accelerate with the configured backend."""
    if world_size <= 1:
        return Unsharded()
    if backend in NOT_WIRED:
        from pasodoble.errors import ConfigError

        raise ConfigError(
            "distributed.backend",
            f"{backend} on {world_size} ranks is validated by `pasodoble layout` but not trained with yet: "
            f"{NOT_WIRED[backend]}; use distributed.backend=ddp",
        )
    return Accelerated(backend, world_size, zero_stage=zero_stage, offload_optimizer=offload_optimizer)
