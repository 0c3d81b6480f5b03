"""The `sft:` config section (`SFTConfig`: steps, batches, learning rate, the warm-up's roles), checked without
torch; `trainer.py` runs it and re-exports it. Apart so that a recipe is read and checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from pasodoble.errors import ConfigError


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
