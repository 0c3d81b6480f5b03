"""Builds the project's C kernels (`core/*.c`) with the system compiler, once per source, compiler and CPU.

What: `build(source, cache)` returns the path of `source` compiled into a shared library under
`cache/native/<key>/`, compiling it first when that folder has none; `key` digests the source and the headers beside
it (`*.h`), the compiler's version, the flags and the CPU's model and features. `compiler()` is `$CC`, else `cc`.
The library is written to a temporary name and renamed into place, so processes that build at once do not clash.
Failures raise RuntimeError with the compiler's message; callers keep their tensor path and say why.

Why: the kernels (`accel.decode_kernel`, `accel.train_attention`) are compiled with `-march=native` for the machine
that runs them, and nothing but the project's own source is ever loaded.

`load(state, source, env, what, bind, instead)` is each kernel module's once-per-process loader: the switch in `env`, the build,
and one warning when it fails.

Run: nothing to call directly; tests in tests/accel/test_decode_kernel.py and tests/accel/test_train_attention.py.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from pasodoble.accel import settings
from pasodoble.errors import ConfigError

FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-shared", "-fPIC")


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def cpu_identity() -> str:
    """The CPU's model name and feature flags (what `-march=native` reads), else the machine's name."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    lines = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(lines[:2]) or platform.machine()


def build_key(source: Path, compiler_path: str, version: str) -> str:
    digest = hashlib.sha256()
    parts = [source.read_bytes()] + [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    for part in (*parts, compiler_path.encode(), version.encode(), " ".join(FLAGS).encode()):
        digest.update(part)
        digest.update(b"\0")
    digest.update(cpu_identity().encode())
    return digest.hexdigest()[:16]


def build(source: Path, cache: Path) -> Path:
    """The compiled library's path, compiling it first when the cache has none; raises RuntimeError on failure."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (install gcc, or set CC)")
    try:
        version = subprocess.run(
            [cc, "--version"], capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        raise RuntimeError(f"{cc} --version failed: {exc}") from exc
    folder = cache / "native" / build_key(source, cc, version)
    target = folder / f"{source.stem}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{source.stem}.", suffix=".so", dir=folder)
    os.close(handle)
    try:
        done = subprocess.run(
            [cc, *FLAGS, "-o", partial, str(source), "-lm"], capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"{cc} failed: {done.stderr.strip()[-500:]}")
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"building {source.name} failed: {exc}") from exc
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def load(state: dict, source: Path, key: str, what: str, bind: Callable[[ctypes.CDLL], object], instead: str):
    """`bind(library)` for `source`'s library, built and loaded once per process and kept in `state` ("lib", and
    "why" it is None): None when fast path `key` is off ("off (accel.KEY)") or the build or `bind` fails
    ("unavailable: ...", with one warning naming `what` and what runs `instead`; an error where `key` is "on")."""
    if "lib" in state:
        return state["lib"]
    from pasodoble.io import default_cache_dir

    bound, why = None, None
    if settings.is_off(key):
        why = f"off (accel.{key})"
    else:
        try:
            bound = bind(ctypes.CDLL(str(build(source, default_cache_dir()))))
        except (RuntimeError, OSError, AttributeError) as exc:
            bound, why = None, f"unavailable: {exc}"
            if settings.mode(key) == "on":
                raise ConfigError(
                    f"accel.{key}", f"is on but the {what} is {why}; set it to auto or off"
                ) from exc
            warnings.warn(f"{what} {why}; {instead}", stacklevel=4)
    state["lib"], state["why"] = bound, why
    return bound
