"""One cgroup per check: a pids cap and a memory cap over every process of the jail, and a sure kill at the end.

What: `Cgroup.create(pids_max, memory_bytes)` makes a child of the launcher's own cgroup (v1: one folder per
controller, `pids` and `memory`; v2: one folder with both), `procs_files` are what the launch wrapper writes its
pid into before it execs the jail, and `destroy()` kills whatever is left (a double-forked daemon included) and
removes the folders. `detect()` says which version and controllers this machine lets the launcher use.

Why: rlimits count per uid and per process; a cgroup counts the whole check, whatever uid or session its
processes end up in. Nesting under the launcher's own cgroup keeps any limit the machine already imposes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def _own_paths() -> dict[str, str]:
    """controller ('' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _v1_dirs() -> dict[str, Path] | None:
    own = _own_paths()
    dirs = {c: ROOT / c / own[c].lstrip("/") for c in ("pids", "memory") if c in own}
    ok = len(dirs) == 2 and all(d.is_dir() and os.access(d, os.W_OK) for d in dirs.values())
    return dirs if ok else None


def _v2_dir() -> Path | None:
    if not (ROOT / "cgroup.controllers").is_file():
        return None
    base = ROOT / _own_paths().get("", "/").lstrip("/")
    try:
        enabled = (base / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    ok = {"pids", "memory"} <= set(enabled) and os.access(base, os.W_OK)
    return base if ok else None


def detect() -> str | None:
    """'v1' or 'v2' when a per-check cgroup with pids and memory can be made here, else None."""
    try:
        if _v2_dir() is not None:
            return "v2"
        if _v1_dirs() is not None:
            return "v1"
    except OSError:
        return None
    return None


@dataclass
class Cgroup:
    dirs: list[Path] = field(default_factory=list)

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    @classmethod
    def create(cls, pids_max: int, memory_bytes: int) -> Cgroup:
        name = f"pasodoble-check-{os.getpid()}-{next(_counter)}"
        group = cls()
        try:
            v2 = _v2_dir()
            if v2 is not None:
                group._make(
                    v2 / name, {"pids.max": pids_max, "memory.max": memory_bytes, "memory.swap.max": 0}
                )
            else:
                dirs = _v1_dirs() or {}
                group._make(dirs["pids"] / name, {"pids.max": pids_max})
                group._make(dirs["memory"] / name, {"memory.limit_in_bytes": memory_bytes})
                swap = group.dirs[-1] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(memory_bytes))
        except (OSError, KeyError):
            group.destroy()
            raise
        return group

    def _make(self, path: Path, settings: dict[str, int]) -> None:
        path.mkdir()
        self.dirs.append(path)
        for key, value in settings.items():
            if (path / key).exists():
                (path / key).write_text(str(value))

    def pids(self) -> set[int]:
        found = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
        return found

    def destroy(self, wait_s: float = 5.0) -> None:
        """SIGKILL every process still in the group (until none is left), then remove the folders."""
        end = time.monotonic() + wait_s
        while (left := self.pids()) and time.monotonic() < end:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)
        for d in reversed(self.dirs):
            for _ in range(200):  # rmdir fails with EBUSY until the killed tasks are reaped
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        self.dirs = []
