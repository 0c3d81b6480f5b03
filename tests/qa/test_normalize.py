"""Golden vectors of the three normalisation rules (SQuAD v1.1 and TriviaQA as their scripts define them)."""

import pytest

from pasodoble.qa.normalize import canonical, normalize, squad, triviaqa

SQUAD = [
    ("The Denver Broncos!", "denver broncos"),
    ("  An apple  a day ", "apple day"),
    ("Saint-Denis", "saintdenis"),
    ("U.S.", "us"),
    ("the_answer", "theanswer"),  # `_` is punctuation, deleted; "theanswer" is no article
    ("Theatre", "theatre"),
    ("1,000", "1000"),
    ("3.5", "35"),  # the benchmark rule joins the digits: why the canonical rule exists
    ("“quoted”", "“quoted”"),  # only ASCII punctuation is deleted
    ("A", ""),
    ("", ""),
]
TRIVIAQA = [
    ("Saint-Denis", "saint denis"),
    ("the_answer", "answer"),
    ("U.S.", "u s"),
    ("‘Tis the season", "tis season"),
    ("The Beatles' song", "beatles song"),
    ("1,000", "1 000"),
    ("  The  END. ", "end"),
]
CANONICAL = [
    ("1,000", "1000"),
    ("12,345,678 people", "12345678 people"),
    ("3.0", "3"),
    ("3.50", "3.5"),
    ("3.5", "3.5"),
    (".5", "0.5"),
    ("007", "7"),
    ("-4", "-4"),
    ("-0", "0"),
    ("three", "3"),
    ("The Three Musketeers", "3 musketeers"),
    ("ninety", "90"),
    ("\uff15 km", "5 km"),  # full-width digit
    ("\ufb01sh", "fish"),  # ligature
    ("Saint\u2013Denis", "saintdenis"),  # en dash is Unicode punctuation
    ("“quoted”", "quoted"),
    ("New\u00a0York", "new york"),
    ("July 4, 1776", "july 4 1776"),  # dates are not canonicalised (docs/QA.md)
    ("v1.2.3", "v123"),
]


@pytest.mark.parametrize(("text", "expected"), SQUAD)
def test_squad_rule(text, expected):
    assert squad(text) == expected == normalize(text, "squad")


@pytest.mark.parametrize(("text", "expected"), TRIVIAQA)
def test_triviaqa_rule(text, expected):
    assert triviaqa(text) == expected == normalize(text, "triviaqa")


@pytest.mark.parametrize(("text", "expected"), CANONICAL)
def test_canonical_rule(text, expected):
    assert canonical(text) == expected == normalize(text)


def test_canonical_keeps_numbers_apart_that_squad_joins():
    assert squad("3.5") == squad("35") and canonical("3.5") != canonical("35")
    assert squad("-4") == squad("4") and canonical("-4") != canonical("4")
    assert canonical("4 July 1776") != canonical("July 4, 1776")


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="squad"):
        normalize("x", "squad2")
