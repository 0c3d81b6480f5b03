"""Atomic, resumable checkpoints of a dual-play run.

What: a checkpoint is a folder `RUN_DIR/checkpoints/step-N/` holding everything a resume needs: both roles
(Hugging Face weights + tokenizer under `<role>/model/`, optimizer and scheduler states), the loop state
(`state.json`: step counters, diversity history, question buffer, knowledge-sampler position, Python RNG) and the
torch RNG state (`rng.pt`). `RUN_DIR/checkpoints/latest` names the newest complete checkpoint.

Why: the reference code saved weights only, so a crashed run started over. Here a run killed at any instant
(SIGKILL included) resumes from its last complete checkpoint and reproduces the uninterrupted run.

How: the folder is written as `step-N.tmp/`, flushed, then renamed to `step-N/` with `os.replace` (atomic on one
file system); only then is `latest` rewritten (temp file + rename), and only after that are checkpoints beyond
`keep_last` removed (renamed to `*.del` first, so a half-deleted folder never looks like a checkpoint). Leftover
`*.tmp` / `*.del` folders from a killed process are cleaned on the next start. Logs written after the checkpoint
(metrics.jsonl, samples.jsonl) are cut back to its step on resume with `truncate_jsonl`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    """Rename then delete, so a kill mid-way never leaves a partial `step-N` folder behind."""
    if not path.exists():
        return
    trash = path.with_name(path.name + ".del")
    if trash.exists():
        shutil.rmtree(trash)
    os.replace(path, trash)
    shutil.rmtree(trash)


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints as (step, folder), oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / "state.json").exists():
            found.append((int(match.group(1)), child))
    return sorted(found)


def save_checkpoint(
    run_dir: str | Path, step: int, write: Callable[[Path], None], *, keep_last: int | None = None
) -> Path:
    """Write checkpoint `step` atomically: `write(tmp_dir)` fills the folder, which must end with `state.json`."""
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"step-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    write(tmp)
    if not (tmp / "state.json").exists():
        raise RuntimeError("a checkpoint writer must create state.json (it marks the checkpoint complete)")
    _fsync_tree(tmp)
    final = root / f"step-{step}"
    _remove(final)
    os.replace(tmp, final)
    _write_text_atomic(root / "latest", final.name + "\n")
    if keep_last is not None:
        for _, old in list_checkpoints(run_dir)[:-keep_last]:
            _remove(old)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder named by `latest`, else the highest complete `step-N`; None when there is none."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / "latest"
    if pointer.exists():
        candidate = root / pointer.read_text(encoding="utf-8").strip()
        if (candidate / "state.json").exists():
            return candidate
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def clean_partial(run_dir: str | Path) -> list[str]:
    """Remove `*.tmp` / `*.del` leftovers of a killed process; returns their names."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    removed = []
    for child in root.iterdir():
        if child.name.endswith((".tmp", ".del")):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
            removed.append(child.name)
    return sorted(removed)


def truncate_jsonl(path: str | Path, max_step: int) -> int:
    """Keep only the rows with `step <= max_step` (and drop a torn last line); returns rows kept."""
    path = Path(path)
    if not path.exists():
        return 0
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if int(row.get("step", 0)) <= max_step:
            kept.append(line)
    _write_text_atomic(path, "".join(line + "\n" for line in kept))
    return len(kept)
