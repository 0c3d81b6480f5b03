"""The QA checker: exact match and F1 over an answer and its aliases; the hacks that must stay wrong."""

import pytest

from pasodoble.qa.check import check, exact_match, extract_answer, token_f1

GOLDS = ["Paris", "City of Light"]


@pytest.mark.parametrize("rule", ["squad", "triviaqa", "canonical"])
def test_the_hacks_stay_wrong_under_every_rule(rule):
    empty = check("", GOLDS, rule=rule)
    stuffed = check("Paris, London, Berlin, Rome", GOLDS, rule=rule)
    longer = check("in Paris, the capital of France", GOLDS, rule=rule)
    assert not empty.correct and empty.em == 0 and empty.f1 == 0
    assert not stuffed.correct and stuffed.em == 0 and stuffed.f1 == pytest.approx(0.4)
    assert not longer.correct and longer.em == 0 and longer.f1 == pytest.approx(2 * 0.2 / 1.2)
    assert not check("Paris, London, Berlin, Rome", GOLDS, rule=rule, f1_threshold=0.5).correct
    assert not check(None, GOLDS, rule=rule).correct
    assert not check("the", ["The"], rule=rule).correct  # both normalise to nothing: not checkable


def test_best_over_answer_and_aliases():
    result = check("the city of light", GOLDS)
    assert result.correct and result.em == 1.0 and result.f1 == 1.0 and result.matched == "City of Light"
    assert check("Paris!", GOLDS).correct
    assert not check("Lyon", GOLDS).correct and check("Lyon", GOLDS).matched is None
    assert not check("Paris", []).correct


def test_token_f1_is_squads():
    assert token_f1("the cat sat", "cat sat on the mat", "squad") == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert token_f1("cat cat", "cat", "squad") == pytest.approx(
        2 * 0.5 * 1 / 1.5
    )  # shared tokens are a multiset
    assert token_f1("dog", "cat", "squad") == 0.0


def test_f1_threshold_is_an_option():
    assert not check("Barack Obama Jr", ["Barack Obama"]).correct
    assert check("Barack Obama Jr", ["Barack Obama"], f1_threshold=0.8).correct


def test_numbers_and_unicode_under_the_canonical_rule_only():
    assert exact_match("3.0", "3") and not exact_match("3.0", "3", "squad")
    assert exact_match("three", "3") and exact_match("1,000", "1000")
    assert not exact_match("3.5", "35") and exact_match("3.5", "35", "squad")
    assert exact_match("\uff11\uff10", "10") and not exact_match("\uff11\uff10", "10", "squad")


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("Answer: Paris", "Paris"),
        ("Let me think.\nThe final answer: Paris\n", "Paris"),
        ("answer:\n\n  Paris  ", "Paris"),
        ("<answer>Paris</answer>", "Paris"),
        ("<think>maybe Lyon</think>Answer: Paris", "Paris"),
        ("Paris\nIt is the capital.", "Paris"),
        ("<think>unfinished", None),
        ("", None),
        ("Answer:   ", None),
    ],
)
def test_extract_answer(reply, answer):
    assert extract_answer(reply) == answer
