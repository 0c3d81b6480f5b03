"""Which malloc the process runs on: the `pasodoble` command starts itself again with TCMalloc preloaded when it finds it.

What: `choose(setting)` turns `PASODOBLE_ALLOCATOR` (`auto`, the default; `tcmalloc`; `jemalloc`; `system`) into the
library to preload, `launch_env(setting, environ)` into the environment to start again with (None when the process
already runs as asked, and for `auto` where a GPU is visible), and `relaunch(setting)` replaces the process with that start (`os.execve`: same PID, same
arguments, same standard streams) before anything heavy is imported. `auto` takes TCMalloc when the machine has it
(Debian: `apt-get install libtcmalloc-minimal4`) and glibc's malloc otherwise. `active()` names the allocator this
process runs on, read from its mapped libraries.

CPU runs only: `auto` keeps glibc's malloc where the machine shows the process an NVIDIA GPU (`gpu_visible`: a
device node, CUDA_VISIBLE_DEVICES not emptied), since TCMalloc's gain was measured on CPU steps and CUDA's and NCCL's
host allocations were never measured on it; and the new start takes the preload out of its own environment again
(`settle`), so that no child process (a vLLM server, NCCL's helpers, a sandbox) inherits it. A `pasodoble` command
started as a child (a `torchrun` rank) decides for itself by the same rule.

Why: torch's CPU tensors come from malloc. On a Zen 4 core, SmolLM2-135M's GRPO step under TCMalloc ran its
update in 0.92x the CPU time of glibc's malloc and peaked at 3,648 MB against 4,055 (`bench/host_memory.py`;
docs/PERFORMANCE.md): glibc's heap fragments between the update's micro-batches, while TCMalloc's size classes reuse
the blocks. PyTorch's and Intel's CPU launchers preload TCMalloc for the same reason.

Run: `PASODOBLE_ALLOCATOR=system pasodoble train ...` to keep glibc's malloc; tests in tests/accel/test_allocator.py.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

SETTINGS = ("auto", "tcmalloc", "jemalloc", "system")
LIBRARIES = {"tcmalloc": "tcmalloc_minimal", "jemalloc": "jemalloc"}  # names for ctypes.util.find_library
PACKAGES = {"tcmalloc": "libtcmalloc-minimal4", "jemalloc": "libjemalloc2"}  # Debian packages that ship them
GUARD = "PASODOBLE_ALLOCATOR_LAUNCHED"  # set in the new start: it never starts itself a third time


def find(name: str) -> str | None:
    """The shared library of allocator `name` on this machine (a soname the dynamic loader resolves), or None."""
    return ctypes.util.find_library(LIBRARIES[name])


def choose(setting: str, finder=find) -> tuple[str | None, str | None]:
    """(allocator, library) for `setting`; (None, None) for glibc's malloc. `auto` is TCMalloc when installed. An
    allocator named but not installed raises ValueError, naming the package that ships it."""
    setting = (setting or "auto").strip().lower()
    if setting not in SETTINGS:
        raise ValueError(f"PASODOBLE_ALLOCATOR={setting!r}: use one of {', '.join(SETTINGS)}")
    if setting == "system":
        return None, None
    name = "tcmalloc" if setting == "auto" else setting
    library = finder(name)
    if library is None and setting != "auto":
        raise ValueError(
            f"PASODOBLE_ALLOCATOR={setting}: {name} is not installed here (Debian/Ubuntu: apt-get install "
            f"{PACKAGES[name]}), or set PASODOBLE_ALLOCATOR=system"
        )
    return (name, library) if library else (None, None)


def gpu_visible(environ: Mapping[str, str], dev: Path = Path("/dev")) -> bool:
    """Whether the process may see an NVIDIA GPU: a device node `/dev/nvidia<N>`, and CUDA_VISIBLE_DEVICES not set
    to none ("" or "-1")."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(dev.glob("nvidia[0-9]*"))


def launch_env(setting: str, environ: Mapping[str, str], finder=find, gpu=None) -> dict[str, str] | None:
    """The environment to start this command again with, `setting`'s allocator preloaded; None when there is
    nothing to do (glibc's malloc asked, none installed, already preloaded, this is already the new start, or
    `auto` where a GPU is visible: see module)."""
    if environ.get(GUARD):
        return None
    if (setting or "auto").strip().lower() == "auto" and (gpu or gpu_visible)(environ):
        return None
    name, library = choose(setting, finder)
    preload = environ.get("LD_PRELOAD", "")
    if library is None or any(LIBRARIES[n] in preload for n in LIBRARIES):  # the user preloaded one already
        return None
    env = {**environ, "LD_PRELOAD": f"{library}:{preload}" if preload else library, GUARD: name}
    if name == "tcmalloc":
        # TCMalloc reports every allocation over 1 GB on stderr by default, and loading a model makes some
        env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", str(1 << 40))
    return env


def active(maps: Path = Path("/proc/self/maps")) -> str:
    """The allocator this process runs on: `tcmalloc`, `jemalloc` or `system` (also where /proc is missing)."""
    try:
        text = maps.read_text()
    except OSError:
        return "system"
    return next((name for name, lib in LIBRARIES.items() if f"lib{lib}" in text), "system")


def settle(environ: dict[str, str] | None = None) -> None:
    """In the new start, takes the preloaded allocator (and the guard) out of `environ` (None: this process's), so
    that child processes start on glibc's malloc; the process itself keeps the allocator it was loaded with."""
    environ = os.environ if environ is None else environ
    name = environ.pop(GUARD, None)
    if not name:
        return
    kept = [p for p in environ.get("LD_PRELOAD", "").split(":") if p and LIBRARIES[name] not in p]
    if kept:
        environ["LD_PRELOAD"] = ":".join(kept)
    else:
        environ.pop("LD_PRELOAD", None)


def relaunch(setting: str | None = None) -> None:
    """Start this command again with the allocator of `setting` (default: `PASODOBLE_ALLOCATOR`, else auto)
    preloaded, when it does not run on it yet; returns only when there is nothing to do. A bad setting is
    reported on stderr and the command goes on with glibc's malloc."""
    setting = os.environ.get("PASODOBLE_ALLOCATOR", "auto") if setting is None else setting
    try:
        env = launch_env(setting, os.environ)
    except ValueError as err:
        print(f"pasodoble: {err}; going on with glibc's malloc", file=sys.stderr)
        return
    if env is not None and getattr(sys, "orig_argv", None):
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, env)
