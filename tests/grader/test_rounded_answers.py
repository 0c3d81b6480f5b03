"""A decimal answer rounded from the gold's fraction (`grader.rounded_answers`, default 2 places).

math-verify's own tests expect `0.33` to match 1/3 inside a vector and `(0.6,2.6667]` to match `(3/5,8/3]` at two
decimal places; a decimal rounded the wrong way, cut short or with too few places stays wrong, a gold that writes
decimals is compared exactly, and `rounded_answers=None` compares exactly everywhere.
"""

from __future__ import annotations

import pytest

from pasodoble.errors import ConfigError
from pasodoble.grader import Grader, GraderConfig
from pasodoble.grader.goldforms import rounded_fractions

VECTOR = "\\begin{pmatrix}\\frac{1}{3}\\\\ \\frac{1}{5} \\end{pmatrix}"
RIGHT = [
    ("\\frac{1}{3}", "\\boxed{0.33}"),
    (VECTOR, "\\boxed{\\begin{pmatrix}0.33\\\\0.2 \\end{pmatrix}}"),
    ("(\\frac{3}{5},\\frac{8}{3}]", "\\boxed{(0.6,2.6667]}"),
    ("2/3", "\\boxed{0.67}"),
    ("x + \\frac{1}{3}", "\\boxed{x + 0.333}"),
]
WRONG = [
    ("\\frac{1}{3}", "\\boxed{0.34}"),
    ("\\frac{1}{3}", "\\boxed{0.3}"),  # one place: below the default's two
    ("2/3", "\\boxed{0.66}"),  # cut, not rounded
    ("0.64", "\\boxed{0.6}"),  # a decimal gold is compared as written
    ("0.333", "\\boxed{0.33}"),
    ("(\\frac{3}{5},\\frac{8}{3}]", "\\boxed{(0.6,2.6667)}"),
]


def test_rounded_fractions_rewrites_only_golds_of_fractions():
    assert rounded_fractions("\\frac{1}{3}", "0.33", 2) == "0.33"
    assert rounded_fractions("(\\frac{3}{5},\\frac{8}{3}]", "(0.6,2.6667]", 2) == "(0.6000,2.6667]"
    assert rounded_fractions("\\frac{1}{3}", "0.3", 2) is None
    assert rounded_fractions("0.5", "0.50", 2) is None
    assert rounded_fractions("7", "7.00", 2) is None
    assert rounded_fractions("\\frac{1}{3}", "0.33", None) is None
    assert rounded_fractions("1/0", "0.33", 2) is None


@pytest.fixture(scope="module")
def grader():
    with Grader(GraderConfig(num_workers=1)) as g:
        yield g


def test_rounded_decimals_right_and_near_misses_wrong(grader):
    pairs = RIGHT + WRONG
    batch = grader.grade([gold for gold, _ in pairs], [response for _, response in pairs])
    got = [v.correct for v in batch.verdicts]
    assert got == [True] * len(RIGHT) + [False] * len(WRONG), list(zip(pairs, got, strict=True))
    assert batch.counters["rounded_golds"] == 8


def test_exact_comparison_when_turned_off():
    with Grader(GraderConfig(num_workers=1, rounded_answers=None)) as g:
        assert [
            v.correct
            for v in g.grade([gold for gold, _ in RIGHT[:3]], [resp for _, resp in RIGHT[:3]]).verdicts
        ] == [False] * 3
    with pytest.raises(ConfigError, match="rounded_answers"):
        GraderConfig(rounded_answers=0).validate()
