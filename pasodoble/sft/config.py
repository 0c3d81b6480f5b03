"""The `sft:` config section (`SFTConfig`: steps, batches, learning rate, the warm-up's roles), the recipe of
`pasodoble sft` (`SFTRunConfig`) and the QA world's cold start (`QAWarmUp`), checked without torch; `trainer.py`,
`run.py` and `qa_models.py` run them (the first and last re-export theirs). Apart so that a recipe is read and
checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pasodoble.errors import ConfigError
from pasodoble.qa.world import QAWorldConfig
from pasodoble.update.dtype_names import DTYPE_NAMES
from pasodoble.world.config import ModelConfig


@dataclass
class SFTConfig:
    max_steps: int = 2000  # optimizer steps (the tiny world's warm-up stops earlier: world/select.py)
    batch_size: int = (
        32  # examples per step (small batches, more updates: the tiny models learn faster per token)
    )
    lr: float = 5e-3  # peak AdamW learning rate (tiny models take a large one; use ~1e-5 for 1B+ models)
    warmup_steps: int = 30  # linear warm-up steps
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # gradient clipping
    group_by_length: bool = False  # batch examples of similar length (less padding, but one-format batches)
    max_length: int | None = None  # longest prompt + completion in tokens (None: the model's max positions)
    seed: int = 0  # data order
    num_threads: int | None = (
        1  # torch CPU threads; 1 because 2 threads ran 15x slower on a busy 2-core machine
    )
    log_every: int = 10  # steps between logged loss rows
    roles: str = "joint"  # warm-up: "joint" = one model on both roles' data; "separate" = one model per role
    micro_batch_size: int | None = (
        None  # examples per forward pass; gradients add up to the batch (None: all)
    )
    eval_every: int | None = None  # steps between eval losses, when there is an eval set (None: at the end)
    bf16: bool = False  # bfloat16 autocast over fp32 master weights (the optimizer keeps fp32)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, slower)
    packing: bool = False  # several examples per row of max_length tokens, kept apart by the attention mask

    def validate(self) -> None:
        for name in ("max_steps", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sft.{name}", "must be at least 1")
        for name in ("micro_batch_size", "eval_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"sft.{name}", "must be at least 1, or null")
        if self.lr <= 0:
            raise ConfigError("sft.lr", "must be positive, e.g. 3e-3 for tiny models")
        if self.roles not in ("joint", "separate"):
            raise ConfigError("sft.roles", f"must be 'joint' or 'separate', got {self.roles!r}")


@dataclass
class SFTRunConfig:
    model: str | None = None  # model folder, Hugging Face id, or tiny:base / tiny:proposer / tiny:solver
    data: str | None = None  # JSONL of {"prompt", "completion"[, "system"]} (what sft-data writes)
    out: str | None = None  # output folder: HF checkpoint, metrics.jsonl, config.yaml
    eval_data: str | None = None  # held-out JSONL of the same form (None: eval_fraction of data)
    eval_fraction: float = 0.0  # share of data held out for the eval loss when eval_data is None (0: no eval)
    device: str | None = None  # torch device (None: cuda when available, else cpu)
    dtype: str = "float32"  # weights on load; float32 + sft.bf16 is bf16 compute over fp32 master weights
    sft: SFTConfig = field(default_factory=SFTConfig)  # the training loop

    def validate(self) -> None:
        for name in ("model", "data", "out"):
            if not getattr(self, name):
                raise ConfigError(name, f"is required (--{name} or {name}= in the recipe)")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ConfigError("eval_fraction", f"must be in [0, 1), got {self.eval_fraction}")
        if self.dtype not in DTYPE_NAMES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPE_NAMES)}, got {self.dtype!r}")


def _qa_sft() -> SFTConfig:
    # a few hundred facts need many epochs, not many examples; measured in docs/QA.md ("The tiny QA world")
    return SFTConfig(max_steps=300, batch_size=32, lr=5e-3, warmup_steps=30, log_every=50)


@dataclass
class QAWarmUp:
    world: QAWorldConfig = field(default_factory=QAWorldConfig)  # the invented facts and their tiers
    model: ModelConfig = field(default_factory=ModelConfig)  # size of the tiny Qwen3 base
    vocab_size: int = 400  # BPE vocabulary, special and tag tokens included
    sft: SFTConfig = field(default_factory=_qa_sft)  # the cold start (roles: joint or separate)

    def validate(self) -> None:
        if self.vocab_size < 300:
            raise ConfigError("vocab_size", "must be at least 300 (256 bytes + special and tag tokens)")
        if self.world.proposer_facts != "sft" and self.sft.roles != "separate":
            raise ConfigError(
                "sft.roles",
                f"must be separate when world.proposer_facts is {self.world.proposer_facts!r} (a joint model "
                "would teach the Solver the corpus facts the Proposer's records ask about); set sft.roles=separate",
            )
