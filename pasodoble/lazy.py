"""A package's re-exports imported on first use (PEP 562), so that a light submodule of a heavy package loads alone.

Why: a package's `__init__` runs before any of its submodules, so one that imports its public API eagerly (the SFT
trainer, the rollout engines, the evaluation runner) loads torch whenever a config dataclass beside them is read;
the command line reads and checks a recipe before it imports torch. `lazy_exports` keeps `from pasodoble.sft import
train_sft` working: the module that defines a name is imported when the name is first read, and the name is then
kept on the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `names` maps each exported name to the module that defines it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
