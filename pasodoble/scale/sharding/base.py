"""The sharding interface (`Sharding`) that every backend implements, and helpers the backends share.

A `Role` trains through one `Sharding` object, built where the roles are built by `build_sharding` (this package's
`__init__`): `unsharded` (one process), `ddp` (Accelerate), `fsdp2` (torch's fully_shard), `deepspeed` (ZeRO 1-3).
The role calls `accumulate`, `backward`, `step`, enters `gathered` / `updating` around each phase that runs the
model, and moves full state dicts through `full_state` / `load_weights` / `load_optimizer`. The mechanism of each
backend, and why the phases gather once, is in docs/SCALE.md.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch

from pasodoble.errors import ConfigError
from pasodoble.rollout.base import RolloutEngine


class Sharding(Protocol):
    """How a role's model and optimizer train on this process's ranks; see docs/SCALE.md ("Sharding backends").

    Backends subclass it explicitly and inherit the bodies below, which are right for a backend whose every rank
    holds the full weights (one process, DDP); they override what they do differently."""

    backend: str  # the `distributed.backend` value it implements ("none" on one process)
    grad_scale: (
        float  # turns the backend's gradient average over ranks into the full-batch sum (1.0: one rank)
    )
    # the LM head may be applied to hidden states outside the model's forward (the chunked log-probs): its weight is
    # whole on every rank there; ZeRO-3 partitions it, so it says False
    head_outside_forward: bool = True

    def prepare(
        self,
        name: str,
        model: torch.nn.Module,
        optimizer,
        *,
        max_grad_norm: float | None = None,
        compute_dtype: torch.dtype | None = None,
    ):
        """The model the loss runs through and the optimizer to step (`max_grad_norm`: for engines that clip
        inside their own step; `compute_dtype`: the role's, for backends that cast what they gather)."""
        return model, optimizer

    def accumulate(self, model: torch.nn.Module, last: bool):
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> torch.Tensor | float:
        """The pre-clip gradient norm, a tensor on the gradients' device (read back once per update, by the Role)."""
        params = [p for p in model.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(params, max_norm) if params else 0.0

    def step(self, model: torch.nn.Module, optimizer, scaler, max_norm: float) -> torch.Tensor | float:
        """One optimizer step on the accumulated gradients; returns the pre-clip gradient norm (a tensor or a
        float, as `clip_grad_norm` gives it)."""
        scaler.unscale_(optimizer)  # float16 only: clip the true gradient, not the scaled one
        grad_norm = self.clip_grad_norm(model, max_norm)
        scaler.step(optimizer)  # skips the step if a float16 gradient overflowed
        scaler.update()
        return grad_norm

    def gathered(self, model: torch.nn.Module):
        """A phase (generation, scoring, update) run on the full weights: here they always are."""
        return contextlib.nullcontext()

    def updating(self, model: torch.nn.Module):
        """The update phase's context (every rank enters it once per update): the phase-wide gather of
        `gathered`, except where the engine gathers per forward in updates (DeepSpeed ZeRO-3)."""
        return self.gathered(model)

    def sync_engine(self, model: torch.nn.Module, engine: RolloutEngine) -> None:
        """After an update (every rank calls it): the role's rollout engine samples from the new weights."""
        engine.update_weights(model)

    def prepare_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        """The frozen reference model of the KL term (`beta > 0`): it runs only inside updates."""
        return model

    def refresh(self, model: torch.nn.Module) -> None:
        """After optimizer.step() inside `gathered`: nothing to refresh, the module holds the stepped weights."""

    def full_state(self, model: torch.nn.Module, optimizer, *, all_ranks: bool = False) -> dict | None:
        """Full weights and optimizer state for a checkpoint (every rank calls it); None: the live module and
        optimizer are already full, save them as they are."""
        return None

    def load_weights(self, model: torch.nn.Module, state_dict: dict) -> None:
        model.load_state_dict(state_dict)

    def load_optimizer(self, model: torch.nn.Module, optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)


@contextlib.contextmanager
def nested_once(depth: dict[int, int], key: int, enter, leave):
    """`enter()` on the outermost of nested entries under `key` (`depth` counts them), `leave()` when it exits."""
    outer = depth.get(key, 0) == 0
    if outer:
        enter()
    depth[key] = depth.get(key, 0) + 1
    try:
        yield
    finally:
        depth[key] -= 1
        if outer:
            leave()


def _tie(model: torch.nn.Module, state_dict: dict) -> dict:
    """Gathering copies tied parameters (embedding and LM head) separately: alias them again, as the module's own
    state dict does, so `save_pretrained` writes one tensor for them."""
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first and name in state_dict and first[id(param)] in state_dict:
            state_dict[name] = state_dict[first[id(param)]]
        first.setdefault(id(param), name)
    return state_dict


def _by_index(state: dict) -> dict:
    """torch's full optimizer state (keyed by parameter name) -> `Optimizer.state_dict()`'s layout (by index);
    ranks that received nothing (all but rank 0 with `cpu_offload`) keep their empty dict."""
    if not state:
        return state
    order = [name for group in state["param_groups"] for name in group["params"]]
    index = {name: i for i, name in enumerate(order)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]],
    }


def _by_name(state: dict, order: list[str]) -> dict:
    """The inverse of `_by_index`, for the optimizer's parameters in `order`."""
    return {
        "state": {order[i]: value for i, value in state["state"].items()},
        "param_groups": [{**g, "params": [order[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def refuse_lora(backend: str, world_size: int, roles: dict, why: str) -> None:
    """A trainable LoRA role on a backend that does not train adapters on several ranks: one line saying why."""
    for name, cfg in roles.items():
        if cfg.trainable and cfg.lora is not None:
            raise ConfigError(
                f"{name}.lora",
                f"LoRA with distributed.backend={backend} on {world_size} ranks is not wired yet ({why}); "
                "use distributed.backend=ddp",
            )
