"""The seven shipped sets: documented row counts, unique ids, non-empty questions, every gold readable by the grader.

Needs the benchmark files beside the repository (`../shared/benchmarks`) or `PASODOBLE_DATA_DIR`; skipped otherwise.
"""

import os
from pathlib import Path

import pytest

from pasodoble.errors import UserError
from pasodoble.evals import BENCHMARKS, load_benchmark, resolve_data_dir
from pasodoble.evals.benchmarks import parse_benchmark_names

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
DATA = Path(os.environ.get("PASODOBLE_DATA_DIR") or SHARED)
needs_data = pytest.mark.skipif(
    not (DATA / "benchmarks" / "gsm8k").is_dir() and not (DATA / "gsm8k").is_dir(),
    reason=f"benchmark files not found at {DATA} (set PASODOBLE_DATA_DIR to the folder holding benchmarks/)",
)
EXPECTED_ROWS = {
    "aime24": 30,
    "aime25": 30,
    "amc23": 40,
    "gsm8k": 1319,
    "math500": 500,
    "minerva_math": 272,
    "olympiadbench": 675,
}


@pytest.fixture(scope="module")
def loaded():
    return {name: load_benchmark(name, DATA) for name in BENCHMARKS}


@needs_data
def test_row_counts_ids_and_fields(loaded):
    assert {name: len(problems) for name, problems in loaded.items()} == EXPECTED_ROWS
    for name, problems in loaded.items():
        assert len({p.id for p in problems}) == len(problems), name
        assert all(p.source == name and p.question.strip() and p.answers for p in problems), name
        assert all(a.strip() for p in problems for a in p.answers), name


@needs_data
def test_known_golds(loaded):
    first = {name: problems[0] for name, problems in loaded.items()}
    assert first["aime24"].answers == ("204",) and first["aime24"].id == "60"
    assert first["amc23"].answers == ("27",)  # JSON 27.0
    assert first["gsm8k"].answers == ("18",)  # text after ####
    assert first["math500"].answers == ("\\left( 3, \\frac{\\pi}{2} \\right)",)
    assert first["olympiadbench"].answers == ("2",)  # list entry, $...$ removed
    assert all("," not in p.answers[0] for p in loaded["gsm8k"])  # 1,000 -> 1000
    minerva = {p.id: p for p in loaded["minerva_math"]}
    assert minerva["0"].answers == ("1.6",)  # last \boxed{} of the solution


@needs_data
def test_every_gold_is_graded_equal_to_itself(loaded):
    from pasodoble.grader import Grader

    golds = [a for problems in loaded.values() for p in problems for a in p.answers]
    with Grader() as grader:
        direct = grader.grade(golds, golds, extract=False).verdicts
        boxed = grader.grade(golds, [f"The answer is \\boxed{{{g}}}." for g in golds], extract=True).verdicts
    failed = [g for g, v, w in zip(golds, direct, boxed) if not (v.correct and w.correct)]
    assert failed == []


@needs_data
def test_data_dir_may_be_the_benchmarks_folder_or_its_parent(monkeypatch):
    bench = resolve_data_dir(DATA)
    assert resolve_data_dir(bench) == bench
    monkeypatch.setenv("PASODOBLE_DATA_DIR", str(DATA))
    assert resolve_data_dir() == bench
    assert len(load_benchmark("aime25", limit=3)) == 3


def test_no_data_dir_and_no_network_names_the_flag(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv("PASODOBLE_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError, match="gsm8k: no --data-dir or PASODOBLE_DATA_DIR given.*openai/gsm8k"):
        load_benchmark("gsm8k")
    with pytest.raises(UserError, match="--data-dir: .* is not a directory"):
        load_benchmark("gsm8k", "/nonexistent-dir")


def test_benchmark_names():
    assert parse_benchmark_names("aime24, gsm8k") == ["aime24", "gsm8k"]
    assert parse_benchmark_names("all") == list(BENCHMARKS)
    assert "minerva_math" not in parse_benchmark_names("paper")
    with pytest.raises(UserError, match="unknown aime2099"):
        parse_benchmark_names("aime24,aime2099")
