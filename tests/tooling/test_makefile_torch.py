"""`make install` picks torch's build from the machine: the CPU build where there is no NVIDIA GPU, PyPI's default
(CUDA) build where `nvidia-smi` exists, and whatever `TORCH_INDEX_URL` names when it is given (`make -n`: the
commands are printed, nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _torch_line(tmp_path: Path, *, gpu: bool, overrides: tuple[str, ...] = ()) -> str:
    """The pip command `make install` would run for torch, with or without an `nvidia-smi` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    env = {**os.environ, "PATH": str(bin_dir)}  # no real nvidia-smi either: make runs by its absolute path
    env.pop("TORCH_INDEX_URL", None)
    out = subprocess.run(
        [MAKE, "-n", "install", f"VENV={tmp_path / 'venv'}", *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return next(line for line in out.splitlines() if '"torch==' in line)


def test_no_gpu_installs_the_pinned_cpu_build(tmp_path):
    line = _torch_line(tmp_path, gpu=False)
    assert '"torch==2.13.0+cpu"' in line
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line


def test_a_gpu_machine_gets_pypis_default_build(tmp_path):
    line = _torch_line(tmp_path, gpu=True)
    assert '"torch==2.13.0"' in line and "index-url" not in line


def test_torch_index_url_overrides_the_choice(tmp_path):
    cuda = _torch_line(
        tmp_path, gpu=False, overrides=("TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126",)
    )
    assert (
        '"torch==2.13.0+cu126"' in cuda and "--extra-index-url https://download.pytorch.org/whl/cu126" in cuda
    )
    default = _torch_line(tmp_path, gpu=False, overrides=("TORCH_INDEX_URL=",))
    assert '"torch==2.13.0"' in default and "index-url" not in default
