"""Fixtures of the `real` tests: packaged models from the cache that `make fetch-real` fills (nothing is downloaded
here; a missing entry fails with the command that fetches it)."""

from __future__ import annotations

import pytest
import torch

from pasodoble.realmodels import entry_dir, resolve_pkg
from pasodoble.realmodels.store import MANIFEST


def cached(spec: str) -> str:
    if not (entry_dir(spec) / MANIFEST).is_file():
        pytest.fail(f"{spec} is not in the model cache; run `make fetch-real` first")
    return resolve_pkg(spec, progress=False)


@pytest.fixture(scope="session")
def smol_dir() -> str:
    torch.set_num_threads(1)
    return cached("pkg:smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen3_dir() -> str:
    return cached("pkg:qwen3-random")


@pytest.fixture(scope="session")
def qwen25_dir() -> str:
    return cached("pkg:qwen2.5-random")
