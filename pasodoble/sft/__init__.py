"""The cold start: supervised fine-tuning of both roles before RL, and the data it trains on.

- `trainer.py`: the SFT loop (completion-only loss, chat template, eval split, bf16 autocast, HF checkpoints).
- `teacher.py`: the `Teacher` interface and its two implementations, an OpenAI-compatible HTTP endpoint and a local
  model through the project's rollout engine; they are interchangeable everywhere.
- `data.py`: `pasodoble sft-data`, verified Proposer and Solver SFT sets from a teacher and a checker.
- `cli.py`: the `sft` and `sft-data` commands; it, not the trainer, resolves `tiny:` model specs.
"""

from pasodoble.sft.trainer import (
    IGNORE_INDEX,
    SFTConfig,
    batch_order,
    collate,
    encode_examples,
    load_examples,
    lr_at,
    train_sft,
)

__all__ = [
    "IGNORE_INDEX",
    "SFTConfig",
    "batch_order",
    "collate",
    "encode_examples",
    "load_examples",
    "lr_at",
    "train_sft",
]
