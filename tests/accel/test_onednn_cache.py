"""Importing pasodoble bounds oneDNN's kernel cache and torch's oneDNN bridge cache on a CPU, unless the user set them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _capacity_after_import(env_value: str | None, name: str = "ONEDNN_PRIMITIVE_CACHE_CAPACITY") -> str:
    env = {k: v for k, v in os.environ.items() if k != name}
    if env_value is not None:
        env[name] = env_value
    code = f"import os, pasodoble; print(os.environ['{name}'])"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard, generous for a loaded machine
        check=True,
    )
    return done.stdout.strip()


def test_import_sets_a_small_kernel_cache_and_a_users_value_wins():
    assert _capacity_after_import(None) == "32"
    assert _capacity_after_import("1024") == "1024"
    assert _capacity_after_import(None, "LRU_CACHE_CAPACITY") == "16"  # torch's oneDNN bridge
    assert _capacity_after_import("1024", "LRU_CACHE_CAPACITY") == "1024"
