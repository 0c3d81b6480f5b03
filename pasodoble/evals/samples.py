"""The samples file: one JSONL row per generated sample, appended problem by problem, and read back on resume.

Why: peers' harnesses write results only at the end, so a killed evaluation restarts from zero and nobody can
audit a score. Here each finished problem's k rows are appended in one write with an fsync (`pasodoble.io`), and a
re-run of the same command reads the file, keeps the problems that have all k rows, and redoes only the rest.

Repair on resume: a torn last line (the process died mid-write; any line that is not a readable samples row is
counted with it) and the rows of a problem with fewer than k
samples are dropped; the file is rewritten atomically without them, so nothing is duplicated or lost. A problem
with more than k rows means the file came from a run with a larger --num-samples: that is a user error.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import truncate_jsonl
from pasodoble.jsonl import iter_jsonl

Key = tuple[str, str]  # (source, problem id)


@dataclass
class ResumeState:
    """What a previous run left in the samples file."""

    finished: dict[Key, list[dict]] = field(default_factory=dict)  # complete problems, rows sorted by sample
    torn_lines: int = 0  # unparseable lines dropped (a write cut short by a crash)
    partial_rows: int = 0  # rows of problems with fewer than k samples, dropped to be redone


def row_key(row: dict) -> Key:
    return (str(row["source"]), str(row["id"]))


def _row_key_or_none(row: object) -> Key | None:
    """The row's key, or None for a line that is JSON but not a samples row (counted as torn, then dropped)."""
    if not isinstance(row, dict) or "source" not in row or "id" not in row:
        return None
    sample = row.get("sample")
    return row_key(row) if isinstance(sample, int) and not isinstance(sample, bool) and sample >= 0 else None


def load_resume_state(path: Path, num_samples: int) -> ResumeState:
    """Read and repair the samples file of an interrupted run (see module docstring)."""
    state = ResumeState()
    if not path.exists():
        return state
    groups: dict[Key, list[dict]] = defaultdict(list)
    for _, row, problem in iter_jsonl(path):
        if problem is not None or _row_key_or_none(row) is None:
            state.torn_lines += 1
            continue
        groups[row_key(row)].append(row)
    for key, rows in groups.items():
        samples = sorted({int(r["sample"]) for r in rows})
        if len(rows) > num_samples or (samples and samples[-1] >= num_samples):
            raise UserError(
                f"{path}: problem {key[0]}/{key[1]} has {len(rows)} samples but --num-samples is {num_samples}; "
                "use the same settings as the first run, or a new --out directory"
            )
        if samples == list(range(num_samples)) and len(rows) == num_samples:
            state.finished[key] = sorted(rows, key=lambda r: int(r["sample"]))
        else:
            state.partial_rows += len(rows)
    if state.torn_lines or state.partial_rows:
        # Repair before anything is appended: a new row written after a torn line would be glued onto it.
        try:
            truncate_jsonl(path, lambda row: _row_key_or_none(row) in state.finished)
        except (
            ValueError
        ) as err:  # an unreadable line before the last one: not a crash mid-append, so not ours
            raise UserError(
                f"{err}; the samples file was edited or corrupted: fix or remove that line"
            ) from err
    return state
