"""The one place that knows which sharding backends exist: `build_sharding` and the checks made before loading.

`distributed.backend` names the backend, one module each: `ddp` (Accelerate), `fsdp2` (torch's fully_shard),
`deepspeed` (ZeRO 1-3); one rank always trains `unsharded`. All implement `base.Sharding`; see docs/SCALE.md.
"""

from __future__ import annotations

from pasodoble.scale.sharding.base import Sharding, refuse_lora
from pasodoble.scale.sharding.ddp import Accelerated
from pasodoble.scale.sharding.deepspeed import DeepSpeedZero
from pasodoble.scale.sharding.deepspeed import check_roles as check_deepspeed
from pasodoble.scale.sharding.fsdp2 import FullyShard
from pasodoble.scale.sharding.unsharded import Unsharded
from pasodoble.update.liger import refuse_ranks


def check_roles(backend: str, world_size: int, roles: dict) -> None:
    """Refuse, before any model loads, the settings the backend on several ranks does not train with yet."""
    for name, cfg in roles.items():
        if cfg.trainable and cfg.loss_kernel == "liger":
            refuse_ranks(f"{name}.loss_kernel", world_size)
    if backend == "deepspeed":
        return check_deepspeed(backend, world_size, roles)
    if backend != "fsdp2" or world_size <= 1:
        return
    refuse_lora(
        backend,
        world_size,
        roles,
        "the adapter is saved and synced from the wrapped module, not from gathered shards",
    )


def build_sharding(
    backend: str, world_size: int, *, zero_stage: int = 2, offload_optimizer: bool = False
) -> Sharding:
    """`Unsharded` on one rank; `FullyShard` for fsdp2; `DeepSpeedZero` for deepspeed; else Accelerate (DDP)."""
    if world_size <= 1:
        return Unsharded()
    if backend == "fsdp2":
        return FullyShard(world_size, offload=offload_optimizer)
    if backend == "deepspeed":
        return DeepSpeedZero(world_size, zero_stage=zero_stage, offload_optimizer=offload_optimizer)
    return Accelerated(backend, world_size)
