"""Small file helpers whose point is durability: atomic writes and append-only JSONL.

A run may be killed at any moment (SIGKILL, a pre-empted node). Files that a resume or a report reads are therefore
written to a temporary sibling and renamed into place (`os.replace` is atomic on POSIX), and JSONL streams are
appended a whole line at a time with a flush and fsync, so a reader sees either a complete row or nothing; a torn
last line left by a crash is dropped by `read_jsonl`, which also reads files with bad bytes (`pasodoble.jsonl`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pasodoble.jsonl import BadJsonlError, iter_jsonl, warn_skipped


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def append_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    """Append rows (one JSON object per line) and fsync, so a crash never leaves a partial row behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    if not data:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | Path, *, strict: bool = False, skip_bad: bool = False) -> list[dict]:
    """Rows of a JSONL file. A torn final line (from a crash mid-write) is skipped unless `strict`; any other bad
    line (bad bytes, bad JSON, not an object: see `pasodoble.jsonl`) raises `BadJsonlError` naming it, or with `skip_bad` is
    skipped, with the first few line numbers and the count printed on stderr."""
    rows, bad, last = [], [], 0
    for number, value, problem in iter_jsonl(path):
        last = number
        if problem is None and not isinstance(value, dict):
            problem = "expected a JSON object"
        if problem is None:
            rows.append(value)
        else:
            bad.append((number, problem))
    if bad and not strict and bad[-1][0] == last:
        bad.pop()
    if bad and not skip_bad:
        raise BadJsonlError(f"{path}:{bad[0][0]}: {bad[0][1]}")
    warn_skipped([f"{path}:{number}: {problem}; line skipped" for number, problem in bad])
    return rows


def truncate_jsonl(path: str | Path, keep: Callable[[dict], bool]) -> int:
    """Rewrite a JSONL file atomically keeping only rows where `keep(row)`; returns how many were dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    rows = read_jsonl(path)
    kept = [r for r in rows if keep(r)]
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in kept))
    return len(rows) - len(kept)
