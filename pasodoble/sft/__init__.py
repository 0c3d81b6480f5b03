"""The cold start: supervised fine-tuning of both roles before RL, and the data it trains on.

- `trainer.py`: the SFT loop (completion-only loss, chat template, eval split, bf16 autocast, HF checkpoints).
- `teacher.py`: the `Teacher` interface and its two implementations, an OpenAI-compatible HTTP endpoint and a local
  model through the project's rollout engine; they are interchangeable everywhere.
- `data.py`: `pasodoble sft-data`, verified Proposer and Solver SFT sets from a teacher and a checker.
- `cli.py`: the `sft` and `sft-data` command lines, checked before torch; `run.py` runs them and, not the
  trainer, resolves `tiny:` model specs.
- `config.py`: `SFTConfig`, `SFTRunConfig` and `QAWarmUp`; `examples.py`: the JSONL examples; both read without
  torch. The names below load on first use (`pasodoble.lazy`).
"""

from typing import TYPE_CHECKING

from pasodoble.lazy import lazy_exports

if TYPE_CHECKING:
    from pasodoble.sft.config import SFTConfig
    from pasodoble.sft.examples import load_examples
    from pasodoble.sft.trainer import (
        IGNORE_INDEX,
        batch_order,
        collate,
        encode_examples,
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
__getattr__ = lazy_exports(
    __name__,
    {
        "IGNORE_INDEX": "pasodoble.sft.trainer",
        "SFTConfig": "pasodoble.sft.config",
        "batch_order": "pasodoble.sft.trainer",
        "collate": "pasodoble.sft.trainer",
        "encode_examples": "pasodoble.sft.trainer",
        "load_examples": "pasodoble.sft.examples",
        "lr_at": "pasodoble.sft.trainer",
        "train_sft": "pasodoble.sft.trainer",
    },
)
