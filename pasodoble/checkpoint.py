"""Atomic, verified, resumable checkpoints of a dual-play run.

What: `RUN_DIR/checkpoints/step-N/` holds everything a resume needs: both roles (Hugging Face weights and tokenizer,
optimizer and scheduler states), the loop state (`state.json`), the RNG states (`rng.pt`) and `manifest.json`,
which lists every other file with its size and sha256; `checkpoints/latest` names the newest complete one.

Why: the reference code saved weights only. Here a run killed at any instant resumes from its last complete
checkpoint and reproduces the uninterrupted run; a checkpoint damaged later is detected, named and set aside
(`select_for_resume`), never half-loaded; and nothing in a run directory executes code when loaded (torch files are
read with `weights_only=True`).

How: written as `step-N.tmp/`, manifest last, flushed, renamed into place with `os.replace`, then `latest`
rewritten, then old checkpoints beyond `keep_last` removed. Logs are cut back to the checkpoint's step on resume.
Checkpoints from before manifests existed resume unverified, with a warning. Details: docs/CHECKPOINTS.md.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import disk_full_error, is_disk_full, sha256_file, write_text_atomic

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
STATE = "state.json"
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


def _remove(path: Path) -> None:
    """Rename then delete, so a kill mid-way never leaves a partial `step-N` folder behind."""
    if not path.exists():
        return
    trash = path.with_name(path.name + ".del")
    if trash.exists():
        shutil.rmtree(trash)
    os.replace(path, trash)
    shutil.rmtree(trash)


def _files(folder: Path) -> list[str]:
    """Relative paths (POSIX) of the regular files under `folder`, the manifest excluded."""
    found = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(rel for rel in found if rel != MANIFEST)


def _sha256_all(folder: Path, rels: list[str]) -> dict[str, str]:
    """Checksums of several files in parallel threads (hashlib releases the GIL on large reads)."""
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(rels)))) as pool:
        return dict(zip(rels, pool.map(lambda rel: sha256_file(folder / rel), rels)))


def write_manifest(folder: Path) -> None:
    """List every file of a finished checkpoint folder with its size and sha256; written last."""
    rels = _files(folder)
    hashes = _sha256_all(folder, rels)
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": hashes[rel]} for rel in rels}
    with open(folder / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump({"version": 1, "files": files}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def _first_link(folder: Path) -> str | None:
    """The first symbolic link at or under `folder` (relative path), never following one."""
    if folder.is_symlink():
        return "."
    for parent, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            if os.path.islink(os.path.join(parent, name)):
                return Path(parent, name).relative_to(folder).as_posix()
    return None


def verify_checkpoint(folder: str | Path) -> tuple[str | None, bool]:
    """(problem, verified): problem is None when the checkpoint is usable; verified is False for a checkpoint
    without a manifest (written before manifests existed), which is only checked for a readable state.json.
    A symbolic link anywhere in it is a problem: a checkpoint holds regular files only, and links are not
    followed out of it."""
    folder = Path(folder)
    link = _first_link(folder)
    if link is not None:
        return f"{link} is a symbolic link (a checkpoint holds regular files only)", False
    if not (folder / MANIFEST).is_file():
        if not (folder / STATE).is_file():
            return f"{MANIFEST} and {STATE} are missing", False
        try:
            json.loads((folder / STATE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return f"{STATE} is unreadable", False
        return None, False
    try:
        listed = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
        sizes = {rel: int(entry["size"]) for rel, entry in listed.items()}
        hashes = {rel: str(entry["sha256"]) for rel, entry in listed.items()}
    except (
        OSError,
        UnicodeDecodeError,
        json.JSONDecodeError,
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
    ):
        return f"{MANIFEST} is unreadable", True
    if STATE not in sizes:
        return f"{MANIFEST} does not list {STATE}", True
    present = set(_files(folder))
    for rel in sorted(sizes):
        if rel not in present:
            return f"{rel} is missing", True
        size = (folder / rel).stat().st_size
        if size != sizes[rel]:
            return f"{rel} is {size} bytes, the manifest says {sizes[rel]}", True
    extra = sorted(present - set(sizes))
    if extra:
        return f"{extra[0]} is not in the manifest", True
    actual = _sha256_all(folder, sorted(sizes))
    for rel in sorted(sizes):
        if actual[rel] != hashes[rel]:
            return f"{rel} fails its sha256 check", True
    return None, True


def _complete(folder: Path) -> bool:
    """Renamed into place by `save_checkpoint` (cheap test; `verify_checkpoint` checks the contents)."""
    return (folder / MANIFEST).is_file() or (folder / STATE).is_file()


def _step_folders(run_dir: str | Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and not child.is_symlink():
            found.append((int(match.group(1)), child))
    return sorted(found)


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints as (step, folder), oldest first."""
    return [(step, folder) for step, folder in _step_folders(run_dir) if _complete(folder)]


def save_checkpoint(
    run_dir: str | Path, step: int, write: Callable[[Path], None], *, keep_last: int | None = None
) -> Path:
    """Write checkpoint `step` atomically: `write(tmp_dir)` fills the folder, which must end with `state.json`.
    A failed write removes the temporary folder; a full disk becomes one `UserError` line naming it."""
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"step-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        write(tmp)
        if not (tmp / STATE).exists():
            raise RuntimeError("a checkpoint writer must create state.json (it holds the loop state)")
        write_manifest(tmp)
        _fsync_tree(tmp)
    except BaseException as err:
        full = isinstance(err, Exception) and is_disk_full(err, root)  # before the space is freed
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise disk_full_error(tmp) from err
        raise
    final = root / f"step-{step}"
    _remove(final)
    os.replace(tmp, final)
    write_text_atomic(root / "latest", final.name + "\n")
    if keep_last is not None:
        for _, old in list_checkpoints(run_dir)[:-keep_last]:
            _remove(old)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder named by `latest`, else the highest complete `step-N`; None when there is none (unverified:
    resume goes through `select_for_resume`). `latest` may name only a `step-N` child of `checkpoints/`: a path
    or a link out of it is ignored."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / "latest"
    if pointer.is_file() and not pointer.is_symlink():
        try:
            name = pointer.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        candidate = root / name
        if (
            _STEP_DIR.match(name)
            and candidate.is_dir()
            and not candidate.is_symlink()
            and _complete(candidate)
        ):
            return candidate
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def refuse_links(run_dir: str | Path) -> None:
    """One `UserError` line when `checkpoints/` or anything in it is a symbolic link: a resume reads, moves aside,
    replaces and deletes what is in there, which must be the run's own folders. Called before anything changes."""
    root = Path(run_dir) / CHECKPOINTS
    links = [root] if root.is_symlink() else []
    if not links and root.is_dir():
        links = sorted(child for child in root.iterdir() if child.is_symlink())
    if links:
        raise UserError(
            f"{links[0]} is a symbolic link (to {os.readlink(links[0])}): a resume reads and rewrites only folders "
            "inside the run; replace the link with a copy of what it points to (cp -rL) or remove it (nothing was "
            "changed)"
        )


def select_for_resume(
    run_dir: str | Path, *, strict: bool = False, warn: Callable[[str], None] = print
) -> Path | None:
    """The newest intact checkpoint (None when the run has none). Each damaged checkpoint newer than it is named
    in one `warn` line and moved aside to `step-N.damaged`; with `strict` the first damaged one raises instead."""
    damaged = []
    for step, folder in reversed(_step_folders(run_dir)):
        problem, verified = verify_checkpoint(folder)
        if problem is None:
            if not verified:
                warn(
                    f"warning: checkpoint {folder} has no {MANIFEST} (an older format); resuming from it unverified"
                )
            return folder
        if strict:
            raise UserError(
                f"checkpoint {folder} is damaged ({problem}); restore it, remove it, or resume without "
                "--strict-resume to fall back to the newest intact checkpoint"
            )
        aside = folder.with_name(folder.name + ".damaged")
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(folder, aside)
        warn(
            f"warning: checkpoint {folder} is damaged ({problem}); moved it to {aside.name}, trying an older one"
        )
        damaged.append(f"step-{step}")
    if damaged:
        raise UserError(
            f"{Path(run_dir) / CHECKPOINTS}: no intact checkpoint to resume from (damaged: {', '.join(damaged)}); "
            "restore one, or start a new run"
        )
    return None


def load_torch_state(path: str | Path, map_location=None):
    """`torch.load` restricted to tensors and plain values (`weights_only=True`): a file that would run code
    (or build any other object) is refused with one `UserError` line naming it."""
    import torch

    try:
        return torch.load(path, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as err:
        raise UserError(
            f"{path}: refused to load: it holds Python objects besides tensors and plain values, which no "
            "checkpoint contains (the file was altered); restore the run directory from a trusted copy"
        ) from err
    except (OSError, EOFError, RuntimeError, ValueError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path}: unreadable checkpoint file ({reason})") from err


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
    write_text_atomic(path, "".join(line + "\n" for line in kept))
    return len(kept)
