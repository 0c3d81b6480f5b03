"""Partial parses: answers and golds that math-verify reads only in part are counted, with verdicts unchanged."""

from __future__ import annotations

import pytest

from pasodoble.errors import ConfigError
from pasodoble.evals import load_benchmark
from pasodoble.grader import Grader, GraderConfig, worker

READ_IN_PART = (
    "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"  # math-verify rejects E_{1}, then reads the last \frac: 2/3
)


def test_partial_answers_and_golds_are_counted(grader):
    grader.clear_cache()  # the grader is shared by the tests: every pair must reach a worker here
    batch = grader.grade(["2/3", READ_IN_PART, "2x+1"], [READ_IN_PART, "2/3", "1+2x"], extract=False)
    # The verdicts stay math-verify's, wrong as they are: both sides are read as 2/3.
    assert [v.correct for v in batch.verdicts] == [True, True, True]
    assert batch.counters["math_verify"] == 3
    assert batch.counters["partial_parses"] == 1
    assert batch.counters["gold_partial_parses"] == 1


def test_reject_grades_partly_read_pairs_wrong():
    interval = (
        "$(-\\infty, 0) \\cup\\{1\\}$."  # an olympiadbench gold: math-verify reads it without "$ ... $."
    )
    golds = ["2/3", READ_IN_PART, "2x+1", interval, interval]
    answers = [READ_IN_PART, "2/3", "1+2x", interval, "(-\\infty, 0) \\cup \\{1\\}"]
    with Grader(GraderConfig(partial_parses="reject")) as strict:
        batch = strict.grade(golds, answers, extract=False)
        again = strict.grade(golds, answers, extract=False)  # from the cache, still rejected
    # The gold's own text keeps its verdict (here it even reaches a worker: the fast path leaves "$" alone).
    assert [v.correct for v in batch.verdicts] == [False, False, True, True, False]
    assert batch.counters["math_verify"] == 5
    assert batch.counters["partial_parses"] == 2 and batch.counters["gold_partial_parses"] == 3
    assert again.verdicts == batch.verdicts and again.counters["cache_hits"] == 5


def test_partial_parses_setting_is_checked():
    with pytest.raises(ConfigError, match="grader.partial_parses: must be one of keep, reject"):
        GraderConfig(partial_parses="drop").validate()


def test_probe_changes_no_parse():
    worker.uninstall_probe()
    plain = [worker.parse_answer(text)[0] for text in (READ_IN_PART, "x = 3", "\\{1, 2\\}")]
    worker.install_probe()
    try:
        probed = [worker.parse_answer(text) for text in (READ_IN_PART, "x = 3", "\\{1, 2\\}")]
    finally:
        worker.uninstall_probe()
    assert [parsed for parsed, _ in probed] == plain
    assert [partial for _, partial in probed] == [True, False, False]


@pytest.mark.slow
def test_benchmark_golds_read_in_part(data_dir):
    """Which of the 2,866 shipped gold answers math-verify reads only in part, by id (a report, kept current)."""
    names = ("aime24", "aime25", "amc23", "gsm8k", "math500", "minerva_math", "olympiadbench")
    worker.install_probe()
    try:
        partial = {
            (name, problem.id): str(parsed[0])
            for name in names
            for problem in load_benchmark(name, data_dir)
            for parsed, is_partial in [worker.parse_answer(", ".join(problem.answers))]
            if is_partial
        }
    finally:
        worker.uninstall_probe()
    assert partial == {
        ("minerva_math", "261"): "2",  # \hbar \omega(v+1 / 2)-\frac{E_{0}^{2} e^{2}}{2 m \omega^{2}}
        ("minerva_math", "268"): "2/3",  # \frac{1}{3} E_{1}+\frac{2}{3} E_{2}
        ("olympiadbench", "1965"): "0",  # f(x)=a x+b$, where $b$ is an arbitrary integer, ...
        ("olympiadbench", "1970"): "Union({1}, Interval.open(-oo, 0))",  # $(-\infty, 0) \cup\{1\}$.
    }
