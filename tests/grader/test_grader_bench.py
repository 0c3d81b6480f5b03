"""The grader benchmark's accounting (`bench/grader.py`): its ceiling and parse floor are computed on the pairs it
believes the grader hands to its workers, so that set must be exactly what a cold grader sends (a mismatch once
counted 2,015 pairs where the grader sent 1,790, because the grader's cache spans the per-set batches)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pasodoble.grader import Grader, GraderConfig

_SPEC = importlib.util.spec_from_file_location(
    "bench_grader", Path(__file__).resolve().parents[2] / "bench" / "grader.py"
)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_routed_pairs_are_what_a_cold_grader_sends_to_its_workers():
    if not (bench.data_dir() / "benchmarks" / "gsm8k").is_dir():
        pytest.skip(f"benchmark data not found under {bench.data_dir()} (set PASODOBLE_DATA_DIR)")
    pairs = bench.build_mix(6, sets=("gsm8k", "math500"), extra_wrong=2)
    mix = {"first": pairs, "again": pairs}  # graded again in a second batch: answered from the cache
    with Grader(GraderConfig(num_workers=1, timeout_s=10.0)) as grader:
        sent = [grader.grade(*mix[name]).counters["math_verify"] for name in mix]
    golds, responses = bench.routed_pairs(mix)
    assert sent[1] == 0
    assert sent[0] == len(golds) == len(responses) > 0
    assert sum(sum(bench.routed_to_math_verify(*batch)) for batch in mix.values()) == 2 * sent[0]


def test_grader_verdicts_equal_math_verify_on_the_extracted_answers():
    """The bench's second agreement line on a few symbolic golds: the grader computes exactly math-verify's verdict
    on `\\boxed{gold}` against `\\boxed{answer}` (fast path, cache and worker shortcuts included)."""
    if not (bench.data_dir() / "benchmarks" / "math500").is_dir():
        pytest.skip(f"benchmark data not found under {bench.data_dir()} (set PASODOBLE_DATA_DIR)")
    mix = {name: bench.build_mix(5, sets=(name,), extra_wrong=1) for name in ("math500", "olympiadbench")}
    with Grader(GraderConfig(num_workers=1, timeout_s=10.0)) as grader:
        got = {name: [v.correct for v in grader.grade(*pairs).verdicts] for name, pairs in mix.items()}
    expected = bench.answer_verdicts(mix)
    assert bench.disagreements(expected, got) == []
    assert 0 < sum(map(sum, got.values())) < sum(map(len, got.values()))  # both verdicts occur
