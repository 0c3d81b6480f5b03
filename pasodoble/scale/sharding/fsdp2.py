"""FSDP2 (`distributed.backend: fsdp2`): torch's `fully_shard` on each decoder layer and the whole model.

Every rank gathers the full weights once per phase (`gathered`), in bfloat16 for a bfloat16 role
(`mixed_precision`: gradients still reduced in float32), so ranks may run different numbers of forwards;
between phases weights, gradients and AdamW states are sharded. Checkpoints hold full, index-keyed state, so an
FSDP2 run resumes on any world size and backend. The mechanism is in docs/SCALE.md ("FSDP2").
"""

from __future__ import annotations

import contextlib

import torch

from pasodoble.rollout.base import RolloutEngine
from pasodoble.rollout.weights import FullWeights
from pasodoble.scale.sharding.base import Sharding, _by_index, _by_name, _tie, nested_once


def mixed_precision(compute_dtype: torch.dtype | None) -> dict:
    """`fully_shard`'s policy for a bfloat16 role: the float32 shards gathered as bfloat16 (half the all-gather and
    the gathered copy) and gradients reduced in float32, as torch's FSDP2 recipes do; nothing for other dtypes."""
    if compute_dtype != torch.bfloat16:
        return {}
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}


class FullyShard(Sharding):
    """torch's FSDP2 (`fully_shard`) applied directly: each decoder layer and then the whole model, over all ranks
    (Accelerate only selects FSDP for GPU runs). Weights, gradients and AdamW states are sharded between phases;
    inside a phase (`gathered`) the full weights are held, see docs/SCALE.md."""

    backend = "fsdp2"

    def __init__(self, world_size: int, *, offload: bool = False):
        from torch.distributed.device_mesh import init_device_mesh

        self.grad_scale = float(world_size)  # FSDP2's reduce-scatter averages over ranks
        self.offload = offload and torch.cuda.is_available()  # on CPU the shards are in CPU memory already
        self.mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world_size,))
        self._sharded: dict[int, list[torch.nn.Parameter]] = {}  # id(model) -> its sharded parameters
        self._depth: dict[int, int] = {}  # id(model) -> nesting depth of `gathered`

    def prepare(
        self,
        name: str,
        model: torch.nn.Module,
        optimizer,
        *,
        max_grad_norm: float | None = None,
        compute_dtype: torch.dtype | None = None,
    ):
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        kwargs = {"mesh": self.mesh, **({"offload_policy": CPUOffloadPolicy()} if self.offload else {})}
        kwargs.update(mixed_precision(compute_dtype))
        for layer in getattr(getattr(model, "model", model), "layers", []):
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        # Inside a phase nothing reshards: forwards and backwards then run no collective (ranks run different
        # numbers of them); gradients still reduce-scatter on the synced backward.
        model.set_reshard_after_forward(False)
        model.set_reshard_after_backward(False)
        # fully_shard replaced the parameters by sharded ones: point the optimizer (and its scheduler) at them.
        self._sharded[id(model)] = [p for p in model.parameters() if p.requires_grad]
        optimizer.param_groups[0]["params"] = list(self._sharded[id(model)])
        return model, optimizer

    def prepare_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        """Sharded like the policy but gathered per forward (FSDP2's default): it runs only in updates, where
        every rank runs the same number of micro-batches, so each of its per-layer all-gathers has every rank."""
        from torch.distributed.fsdp import fully_shard

        for layer in getattr(getattr(model, "model", model), "layers", []):
            fully_shard(layer, mesh=self.mesh)
        fully_shard(model, mesh=self.mesh)
        return model

    @staticmethod
    def _fsdp_modules(model: torch.nn.Module) -> list:
        from torch.distributed.fsdp import FSDPModule

        return [m for m in model.modules() if isinstance(m, FSDPModule)]

    @contextlib.contextmanager
    def gathered(self, model: torch.nn.Module):
        """Every rank enters (a collective: one all-gather per FSDP module); inside, the full weights are
        registered and no forward or backward communicates. Nested entries gather once."""
        modules = self._fsdp_modules(model)
        with nested_once(
            self._depth,
            id(model),
            lambda: [module.unshard() for module in modules],
            lambda: [module.reshard() for module in modules],
        ):
            yield

    def sync_engine(self, model: torch.nn.Module, engine: RolloutEngine) -> None:
        """An engine with its own copy of the weights (vLLM) gets the full weights, gathered on every rank (each
        rank of a colocated layout syncs its own engine; with a shared server rank 0 alone writes them)."""
        if id(model) not in self._sharded or not engine.copies_weights:
            return engine.update_weights(model)
        engine.update_weights(FullWeights(model, self.full_state(model, None, all_ranks=True)["model"]))

    def refresh(self, model: torch.nn.Module) -> None:
        """After optimizer.step(): the gathered copy is stale, so drop it and gather the stepped shards again."""
        if self._depth.get(id(model), 0) == 0:
            return
        modules = self._fsdp_modules(model)
        for module in modules:
            module.reshard()
        for module in modules:
            module.unshard()

    def accumulate(self, model: torch.nn.Module, last: bool):
        model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        # The sharded parameters hold the reduced gradients (inside a phase the module lists the gathered ones).
        params = [p for p in self._sharded.get(id(model), model.parameters()) if p.grad is not None]
        if not params:
            return 0.0
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # a collective on DTensor gradients
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def full_state(self, model: torch.nn.Module, optimizer, *, all_ranks: bool = False) -> dict | None:
        """Full weights and optimizer state, gathered from the shards (every rank calls it); rank 0 gets them,
        every rank with `all_ranks`. The optimizer state is keyed by parameter index, as `Optimizer.state_dict()`
        of an unsharded model, so a checkpoint loads on any world size and any backend."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        if id(model) not in self._sharded:  # a frozen role: never sharded
            return None
        options = StateDictOptions(full_state_dict=True, cpu_offload=not all_ranks)
        out = {"model": _tie(model, get_model_state_dict(model, options=options))}
        if optimizer is not None:
            if not optimizer.state:  # no step yet: nothing to gather (and torch would take a zero step)
                out["optimizer"] = optimizer.state_dict()
            else:
                out["optimizer"] = _by_index(get_optimizer_state_dict(model, optimizer, options=options))
        return out

    def load_weights(self, model: torch.nn.Module, state_dict: dict) -> None:
        """Full (unsharded) weights into the shards: each rank keeps its slice."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        if id(model) not in self._sharded:
            return super().load_weights(model, state_dict)
        set_model_state_dict(model, state_dict, options=StateDictOptions(full_state_dict=True))

    def load_optimizer(self, model: torch.nn.Module, optimizer, state: dict) -> None:
        """An index-keyed full optimizer state (what `full_state` saves) into the sharded AdamW states."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        if not state["state"]:  # saved before the first step: only the hyperparameters
            return super().load_optimizer(model, optimizer, state)
        names = {p: n for n, p in model.named_parameters()}
        order = [names[p] for g in optimizer.param_groups for p in g["params"]]
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(model, optimizer, _by_name(state, order), options=options)
        # Hyperparameters as saved: torch's loader turns tuples (AdamW's betas) into lists.
        for group, saved in zip(optimizer.param_groups, state["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})
