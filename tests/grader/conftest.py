"""Shared by the grader tests: one grader (starting worker processes costs about a second each) and the benchmark
gold answers as the grader sees them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pasodoble.evals import load_benchmark
from pasodoble.grader import Grader, GraderConfig

_DATA = Path(os.environ.get("PASODOBLE_DATA_DIR", Path(__file__).resolve().parents[2] / ".." / "shared"))
SYMBOLIC_SETS = ("math500", "minerva_math", "olympiadbench")


def _data_for(name: str) -> Path:
    """The data folder holding `benchmarks/<name>`; skips the test without it."""
    if not (_DATA / "benchmarks" / name).is_dir():
        pytest.skip(f"benchmark data not found under {_DATA} (set PASODOBLE_DATA_DIR)")
    return _DATA


def _golds(name: str) -> list[str]:
    """One gold string per problem, as the evaluation harness loads it (several accepted parts joined by ", ")."""
    return [", ".join(problem.answers) for problem in load_benchmark(name, _data_for(name))]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The folder holding the shipped benchmark sets (skips without them)."""
    return _data_for("gsm8k")


@pytest.fixture(scope="session")
def symbolic_golds() -> list[str]:
    """Every gold answer of math500, minerva_math and olympiadbench, in that order (skips without the data)."""
    return [gold for name in SYMBOLIC_SETS for gold in _golds(name)]


@pytest.fixture(scope="session")
def grader():
    with Grader(GraderConfig(timeout_s=10.0, num_workers=2)) as shared:
        yield shared
