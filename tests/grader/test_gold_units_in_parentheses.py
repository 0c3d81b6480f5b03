"""Golds with their unit in parentheses, as ASDiv writes them (`9 (apples)`, `0.46 (dollars)`).

A boxed number equal to the gold's number is right, any other number stays wrong, and parentheses around something
math reads (`3 (x)` is 3x, `2 (pi)` is 2 pi) are not a unit.
"""

from __future__ import annotations

import pytest

from pasodoble.grader import Grader, GraderConfig
from pasodoble.grader.goldforms import normalise_answer

RIGHT = [
    ("9 (apples)", "\\boxed{9}"),
    ("0.46 (dollars)", "\\boxed{0.46}"),
    ("12 (square feet)", "So there are \\boxed{12} of them."),
    ("1,250 (pages)", "\\boxed{1250}"),
    ("9 (apples)", "\\boxed{9 apples}"),
]
WRONG = [
    ("9 (apples)", "\\boxed{8}"),
    ("0.46 (dollars)", "\\boxed{0.47}"),
    ("0.46 (dollars)", "\\boxed{46}"),
    ("3 (x)", "\\boxed{3}"),
    ("2 (pi)", "\\boxed{2}"),
]


@pytest.fixture(scope="module", params=["auto", "none"])
def grader(request):
    """The eval's reading (`fallback="auto"`) and the rewards' default (no fallback): both read the unit."""
    with Grader(GraderConfig(fallback=request.param, num_workers=1)) as g:
        yield g


def test_unit_in_parentheses_is_removed_from_a_number():
    assert normalise_answer("9 (apples)") == ("9", ("units",))
    assert normalise_answer("0.46 ( dollars )") == ("0.46", ("units",))
    assert normalise_answer("3 (x)") == ("3 (x)", ())
    assert normalise_answer("2 (pi)") == ("2 (pi)", ())
    assert normalise_answer("(apples) 9") == ("(apples) 9", ())


def test_right_numbers_are_right_and_wrong_numbers_wrong(grader):
    pairs = RIGHT + WRONG
    verdicts = grader.grade([gold for gold, _ in pairs], [response for _, response in pairs]).verdicts
    got = [v.correct for v in verdicts]
    assert got == [True] * len(RIGHT) + [False] * len(WRONG), list(zip(pairs, got, strict=True))
