"""Small file helpers whose point is durability: atomic writes and append-only JSONL.

A run may be killed at any moment (SIGKILL, a pre-empted node). Files that a resume or a report reads are therefore
written to a temporary sibling and renamed into place (`os.replace` is atomic on POSIX), and JSONL streams are
appended a whole line at a time with a flush and fsync, so a reader sees either a complete row or nothing; a torn
last line left by a crash is dropped by `read_jsonl`, which also reads files with bad bytes (`pasodoble.jsonl`).

New files get the permissions `open()` would give them (0666 minus the umask; `tempfile.mkstemp` alone makes them
0600, unreadable to the rest of a team). A write that runs out of disk space ends in one `UserError` line ("no space
left on device", naming the file) and leaves the file as it was: the temporary sibling is removed, and an append
is cut back to the file's previous size. `build_lock` makes processes that need the same cache entry wait for one
builder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pasodoble.errors import UserError
from pasodoble.jsonl import BadJsonlError, iter_jsonl, warn_skipped

_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = ("no space left on device", "os error 28", "disk quota exceeded", "storagefull")


def current_umask() -> int:
    """The process umask, read without changing it where Linux exposes it (`os.umask` is the fallback)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """What `open(path, "w")` gives a new file: 0666 minus the umask."""
    return 0o666 & ~current_umask()


def is_disk_full(err: BaseException, path: str | Path | None = None) -> bool:
    """Whether `err` (or an error it chains to) means the file system is full. Some writers (torch's zip writer)
    lose the errno; for those a file system with under 1 MiB free at `path` counts as full."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _DISK_FULL_ERRNOS:
            return True
        if any(text in str(seen).lower() for text in _DISK_FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    if path is not None:
        try:
            st = os.statvfs(path)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < 1 << 20
    return False


def disk_full_error(path: str | Path) -> UserError:
    return UserError(f"no space left on device writing {path}; free some space or write somewhere else")


def default_cache_dir() -> Path:
    """`$PASODOBLE_CACHE`, else `~/.cache/pasodoble`: where built models (tiny world, real models) are kept."""
    return Path(os.environ.get("PASODOBLE_CACHE") or Path.home() / ".cache" / "pasodoble")


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and is_disk_full(err):
            raise disk_full_error(path) from err
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
    payload = data.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, size)  # no torn row: the file stays as it was before this call
            if is_disk_full(err):
                raise disk_full_error(path) from err
            raise
    finally:
        os.close(fd)


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


LOCK_NOTE_S = 30.0  # a waiting process says so this often


@contextlib.contextmanager
def build_lock(path: Path, what: str):
    """Hold an exclusive lock on `path` while building `what`: concurrent processes (ranks on one node, parallel
    test runs) wait for the builder instead of building twice, with a progress line every `LOCK_NOTE_S`. The
    kernel drops the lock when its holder dies, so a killed builder never blocks the next one."""
    with open(path, "a") as handle:
        start, next_note = time.monotonic(), 0.0
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if waited >= next_note:
                    print(
                        f"waiting for another process building {what} ({waited:.0f} s so far)",
                        file=sys.stderr,
                    )
                    next_note = waited + LOCK_NOTE_S
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def make_build_dir(final: Path) -> Path:
    """A fresh temporary sibling of `final` to build it in (unique across processes and nodes), with the mode a
    plain mkdir gives (mkdtemp's 0700 would make the finished cache entry private to its builder)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp
