"""The batch API: verdicts for every answer kind, counters, cache, extract=False, threads, config checks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pasodoble.errors import ConfigError
from pasodoble.grader import COUNTER_NAMES, Grader, GraderConfig, Verdict, counters_to_metrics

# (gold, response, correct): golds in the benchmark formats, responses as a model would write them.
CASES = [
    ("\\frac{63}{400}", "so the answer is \\boxed{0.1575}", True),
    ("\\frac{63}{400}", "so the answer is \\boxed{\\frac{64}{400}}", False),
    ("27.0", "Thus \\boxed{27}.", True),
    ("[2, 5)", "The interval is \\boxed{[2,5)}", True),
    ("[2, 5)", "The interval is \\boxed{(2,5)}", False),
    ("x=3", "so \\boxed{x = 3}", True),
    ("x=3", "so \\boxed{3}", True),
    ("\\text{(C)}", "The answer is \\boxed{C}", True),
    ("10\\%", "It rose by \\boxed{10\\%}", True),
    ("10\\%", "It rose by \\boxed{10}", True),
    ("1,000", "\\boxed{1000}", True),
    ("90^\\circ", "the angle is \\boxed{90^\\circ}", True),
    ("90^\\circ", "the angle is \\boxed{90}", True),
    ("15", "area \\boxed{15 \\text{ cm}^2}", True),
    ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}", True),
    ("-2,1", "roots \\boxed{1, -2}", True),
    (
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}",
        True,
    ),
    (
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}}",
        False,
    ),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{1}{2}\\sqrt{3}}", True),
    ("18", "She makes 9 * 2 = 18 dollars.\n#### 18", True),
]


def test_verdicts_for_every_answer_kind(grader):
    golds, responses, expected = zip(*CASES, strict=True)
    batch = grader.grade(list(golds), list(responses))
    assert [v.correct for v in batch.verdicts] == list(expected)
    assert all(v.status == "ok" for v in batch.verdicts)
    assert set(batch.counters) == set(COUNTER_NAMES)
    assert batch.counters["checks"] == len(CASES)
    routes = batch.counters["cache_hits"] + batch.counters["fast_path"] + batch.counters["math_verify"]
    assert routes == len(CASES)


def test_worker_shortcuts_are_counted():
    """A disproved simplify and a reused solve show up in the counters; the verdicts are math-verify's (False)."""
    equation = "x^{\\prime}+\\frac{r}{V} x-r c=0"
    golds = ["\\frac{\\cos (2 t)}{15}", equation, equation]
    answers = [
        "\\frac{\\cos (3 t)}{15}",
        "x^{\\prime}+\\frac{r}{V} x-r c=1",
        "x^{\\prime}+\\frac{r}{V} x-r c=2",
    ]
    with Grader(GraderConfig(num_workers=1)) as one_worker:  # both equations reach the same worker
        batch = one_worker.grade(golds, answers, extract=False)
    assert [v.correct for v in batch.verdicts] == [False, False, False]
    assert batch.counters["simplify_skipped"] >= 1
    assert batch.counters["solve_reused"] >= 1


def test_no_answer_and_fallback_are_counted():
    with Grader(GraderConfig(fallback="last_number", num_workers=1)) as grader:
        batch = grader.grade(["12", "12", "12"], ["I think 12.", "nothing", "\\boxed{12}"])
    assert batch.verdicts == [
        Verdict(True, "ok", "12"),
        Verdict(False, "no_answer", None),
        Verdict(True, "ok", "12"),
    ]
    assert batch.counters["fallbacks"] == 1
    assert batch.counters["no_answer"] == 1
    assert batch.counters["math_verify"] == 0  # plain numbers never need a worker


def test_extract_false_takes_answers_as_given(grader):
    batch = grader.grade(["\\frac{1}{2}", "3"], ["0.5", "  "], extract=False)
    assert batch.verdicts == [Verdict(True, "ok", "0.5"), Verdict(False, "no_answer", None)]


def test_repeated_pairs_hit_the_cache(grader):
    golds, responses = ["2x+1"] * 3, ["\\boxed{1+2x}"] * 3
    first = grader.grade(golds, responses)
    second = grader.grade(golds, responses)
    assert [v.correct for v in first.verdicts] == [True] * 3
    assert first.counters["math_verify"] <= 1 and first.counters["cache_hits"] >= 2
    assert second.counters["cache_hits"] == 3 and second.counters["math_verify"] == 0
    assert second.verdicts == first.verdicts


def test_parse_failures_are_counted_not_hidden(grader):
    batch = grader.grade(["5"], ["\\boxed{\\foo{{}}}"])
    assert batch.verdicts[0].correct is False
    assert batch.counters["parse_failures"] == 1


def test_length_mismatch_is_an_error(grader):
    with pytest.raises(ValueError, match="2 golds but 1 responses"):
        grader.grade(["1", "2"], ["\\boxed{1}"])


def test_concurrent_callers_get_their_own_verdicts(grader):
    def grade(offset: int) -> list[bool]:
        golds = [f"{offset}x+{k}" for k in range(4)]
        responses = [
            f"\\boxed{{{k}+{offset}x}}" if k % 2 else f"\\boxed{{{k + 1}+{offset}x}}" for k in range(4)
        ]
        return [v.correct for v in grader.grade(golds, responses).verdicts]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(grade, range(2, 10)))
    assert results == [[False, True, False, True]] * 8


def test_counters_to_metrics_names_and_rates():
    metrics = counters_to_metrics({"checks": 4, "timeouts": 1, "errors": 0})
    assert metrics == {
        "grader/checks": 4.0,
        "grader/timeouts": 1.0,
        "grader/errors": 0.0,
        "grader/timeout_rate": 0.25,
        "grader/error_rate": 0.0,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout_s", 0),
        ("timeout_s", float("inf")),
        ("num_workers", 0),
        ("cache_size", -1),
        ("fallback", "first"),
        ("memory_limit_mb", 10),
        ("wall_limit_factor", 0.5),
        ("wall_limit_factor", float("nan")),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"grader.{field}"):
        Grader(GraderConfig(**{field: value}))
