"""Importing pasodoble bounds oneDNN's kernel cache (bfloat16 products on a CPU), unless the user set it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _capacity_after_import(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    if env_value is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = env_value
    code = "import os, pasodoble; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_import_sets_a_small_kernel_cache_and_a_users_value_wins():
    assert _capacity_after_import(None) == "64"
    assert _capacity_after_import("1024") == "1024"
