"""Shared by the grader tests: one grader (starting worker processes costs about a second each) and the benchmark
gold answers as the grader sees them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pasodoble.grader import Grader, GraderConfig, extract_boxed

_DATA = Path(os.environ.get("PASODOBLE_DATA_DIR", Path(__file__).resolve().parents[2] / ".." / "shared"))
SYMBOLIC_SETS = ("math500", "minerva_math", "olympiadbench")


def _golds(name: str) -> list[str]:
    path = _DATA / "benchmarks" / name / "test.jsonl"
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path} (set PASODOBLE_DATA_DIR)")
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    if name == "minerva_math":
        return [answer for row in rows if (answer := extract_boxed(row["solution"]))]
    if name == "olympiadbench":
        return [", ".join(answer.strip().strip("$") for answer in row["final_answer"]) for row in rows]
    return [str(row["answer"]) for row in rows]


@pytest.fixture(scope="session")
def symbolic_golds() -> list[str]:
    """Every gold answer of math500, minerva_math and olympiadbench, in that order (skips without the data)."""
    return [gold for name in SYMBOLIC_SETS for gold in _golds(name)]


@pytest.fixture(scope="session")
def grader():
    with Grader(GraderConfig(timeout_s=10.0, num_workers=2)) as shared:
        yield shared
