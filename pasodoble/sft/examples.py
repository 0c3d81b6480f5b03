"""SFT examples read from a JSONL file and split into train and eval, without torch: `pasodoble sft` checks its
`--data` before torch is imported, so a missing or malformed file answers in a second.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.jsonl import read_jsonl_skipping, warn_skipped


def split_examples(examples: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, eval): a seeded `fraction` of the examples held out (at least one when fraction > 0)."""
    if fraction <= 0:
        return list(examples), []
    order = list(range(len(examples)))
    random.Random(f"sft-split/{seed}").shuffle(order)
    held = set(order[: max(1, round(fraction * len(examples)))])
    return [e for i, e in enumerate(examples) if i not in held], [
        e for i, e in enumerate(examples) if i in held
    ]


def load_examples(path: Path) -> list[dict]:
    """`{"prompt", "completion"[, "system"]}` rows of a JSONL file; a bad line is reported with its number and
    skipped."""
    if not path.exists():
        raise UserError(f"--data {path}: file not found")
    if not path.is_file():
        raise UserError(f"--data {path}: not a regular file (a folder, device or pipe); give a JSONL file")
    rows, skipped = read_jsonl_skipping(path, _example_problem)
    warn_skipped(skipped)
    if not rows:
        raise UserError(
            f"--data {path}: no usable example ({len(skipped)} bad line(s)); one JSON object a line"
        )
    if skipped:
        print(
            f"--data {path}: {len(skipped)} bad line(s) skipped, {len(rows)} examples read", file=sys.stderr
        )
    examples = []
    for row in rows:
        example = {"prompt": row["prompt"], "completion": row["completion"]}
        if row.get("system"):
            example["system"] = row["system"]
        examples.append(example)
    return examples


def _example_problem(row: object) -> str | None:
    if not (
        isinstance(row, dict)
        and isinstance(row.get("prompt"), str)
        and isinstance(row.get("completion"), str)
    ):
        return "each row needs string fields 'prompt' and 'completion'"
    if not isinstance(row.get("system", ""), str):
        return "'system', when given, must be a string"
    return None
