"""Which command owns an output folder: every command writes only into an empty folder or one it made itself.

What: `claim_folder(path, command, flag)` creates `path` for `command` (`train`, `sft`, `sft-data`, `export`) or
accepts it when that command made it; a non-empty folder of another command, or of nobody, is refused with one line
naming the flag. `check_folder` is the same test without writing anything (resume, export's swap).

Why: `sft --out <a train run>` used to replace the run's config.yaml, write model files into its root and append to
its metrics.jsonl, after which the run could not resume; `sft-data out_dir=<a train run>` replaced its config too.

How: a claimed folder holds `.pasodoble-owner` (the command's name). Folders written before the marker existed are
recognised by the top-level keys of their config.yaml (`schedule`: train, `teacher`: sft-data, `data` and `sft`:
sft) or, for export, by holding only role folders.
"""

from __future__ import annotations

from pathlib import Path

from pasodoble.errors import UserError
from pasodoble.io import write_text_atomic

OWNER_FILE = ".pasodoble-owner"
COMMANDS = ("train", "sft", "sft-data", "export", "serve")
_ROLES = {"proposer", "solver"}


def _owner_from_config(path: Path) -> str | None:
    import yaml

    try:
        data = yaml.safe_load((path / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(data, dict):
        return None
    if "schedule" in data:
        return "train"
    if "teacher" in data:
        return "sft-data"
    if "data" in data and "sft" in data:
        return "sft"
    return None


def folder_owner(path: Path) -> str | None:
    """The command that made `path`: its marker, else what an older version's files show; None when unknown."""
    marker = path / OWNER_FILE
    if marker.is_file():
        try:
            name = marker.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        return name if name in COMMANDS else None
    if (path / "config.yaml").is_file():
        return _owner_from_config(path)
    names = {child.name for child in path.iterdir()}
    if names and names <= _ROLES and all((path / n).is_dir() for n in names):
        return "export"
    return None


def check_folder(path: Path, command: str, flag: str) -> None:
    """Refuse `path` unless it is missing, empty, or `command`'s own (one `UserError` line naming `flag`)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: not a folder; give a folder path for `pasodoble {command}` to write")
    if not path.is_dir() or not any(path.iterdir()):
        return
    owner = folder_owner(path)
    if owner == command:
        return
    what = f"the output of `pasodoble {owner}`" if owner else "files pasodoble did not write"
    raise UserError(
        f"{flag} {path}: this folder holds {what}; `pasodoble {command}` writes only into a new or empty "
        f"folder or one it made itself: choose another {flag}"
    )


def mark_folder(path: Path, command: str) -> None:
    """Write `path`'s owner marker (the folder must exist)."""
    if not (path / OWNER_FILE).is_file():
        write_text_atomic(path / OWNER_FILE, command + "\n")


def claim_folder(path: Path, command: str, flag: str) -> Path:
    """`check_folder`, then create `path` and mark it as `command`'s; returns `path`."""
    check_folder(path, command, flag)
    path.mkdir(parents=True, exist_ok=True)
    mark_folder(path, command)
    return path
