"""The `distributed:` config section (`DistributedConfig`, with the `ResolvedLayout` a launch writes into it) and
`has_proposer`, read and checked without torch; `layout.py` checks a layout against the launch and re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pasodoble.errors import ConfigError
from pasodoble.rollout.settings import PLACEMENTS

BACKENDS = ("ddp", "fsdp2", "deepspeed")


@dataclass
class ResolvedLayout:
    world_size: int = 1  # ranks of the run
    backend: str = "none"  # the engine that reduces gradients ("none" on one rank)
    proposer_shares: list[int] = field(default_factory=list)  # Proposer completions per rank in a full step
    solver_shares: list[int] = field(
        default_factory=list
    )  # Solver answers per rank when every question is valid
    rollout: str = "colocated"  # where rollouts are generated (distributed.rollout)
    vllm_servers: dict[str, list[int]] = field(
        default_factory=dict
    )  # dedicated: GPU indices of each role's vLLM server ([]: on the CPU)


@dataclass
class DistributedConfig:
    backend: str = "ddp"  # "ddp" | "fsdp2" (torch's fully_shard) | "deepspeed" (one rank: plain PyTorch)
    zero_stage: int = 2  # DeepSpeed ZeRO stage (the paper: 2; 3 also shards the weights)
    offload_optimizer: bool = (
        False  # optimizer states in CPU memory (DeepSpeed offload with CPU Adam, FSDP2's)
    )
    timeout_s: float = (
        600.0  # every collective fails with a clear line after this long (a dead or stuck rank)
    )
    prepare_timeout_s: float = (
        7200.0  # ranks 1..N wait this long for rank 0's one-time build (the tiny world)
    )
    gpus: int | None = None  # GPUs the layout needs on each node, vLLM's included (None: not checked)
    rollout: str = (
        "colocated"  # "colocated" (each rank generates on its device) | "dedicated" (shared vLLM servers)
    )
    vllm_gpus: int = (
        0  # GPUs set aside on each node for the dedicated vLLM servers (the paper: 2); 0 with colocated
    )
    tensor_parallel_size: int = 1  # vLLM tensor parallel size; must divide the attention and key/value heads
    vllm_memory_fraction: float = (
        0.0  # share of each training GPU reserved beyond the roles' own vLLM engines
    )
    gpu_memory_gb: float | None = None  # memory of one GPU (None: read from the first visible GPU)
    decisions_log: bool = False  # every rank writes RUN_DIR/decisions/rank-R.jsonl (rank-consistency checks)
    resolved: ResolvedLayout | None = None  # written at launch into the run's config.yaml; ignored when read

    def validate(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(
                "distributed.backend", f"unknown {self.backend!r}; use one of {', '.join(BACKENDS)}"
            )
        if self.zero_stage not in (1, 2, 3):
            raise ConfigError("distributed.zero_stage", "use 1, 2 or 3")
        if self.timeout_s <= 0:
            raise ConfigError("distributed.timeout_s", "must be > 0 seconds")
        if self.prepare_timeout_s <= 0:
            raise ConfigError("distributed.prepare_timeout_s", "must be > 0 seconds")
        if self.vllm_gpus < 0 or self.tensor_parallel_size < 1 or (self.gpus is not None and self.gpus < 1):
            raise ConfigError("distributed.gpus", "gpus >= 1, vllm_gpus >= 0 and tensor_parallel_size >= 1")
        if self.rollout not in PLACEMENTS:
            raise ConfigError(
                "distributed.rollout", f"unknown {self.rollout!r}; use one of {', '.join(PLACEMENTS)}"
            )
        if not 0 <= self.vllm_memory_fraction < 1:
            raise ConfigError("distributed.vllm_memory_fraction", "must be in [0, 1)")


def has_proposer(cfg) -> bool:
    """Whether a run builds a Proposer: every mode but oracle (Solver-only GRPO on true answers)."""
    return cfg.schedule.mode != "oracle"
