"""The world's arithmetic: parser values, precedence, malformed text, and the worked steps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pasodoble.world import arith


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("What is 12 + 47 * 6?", 294),
        ("What is 47 * 6 + 12?", 294),
        ("What is 19+83?", 102),
        ("12 + 47 * 6", 294),
        ("  What is   2 *3*4 ?  ", 24),
        ("What is (1 + 2) * 3?", 9),
        ("What is 10 - 2 - 3?", 5),
        ("What is -3 * -(2 + 1)?", 9),
        ("What is 5?", 5),
        ("What is 007 + 1?", 8),
    ],
)
def test_solve_values(question, value):
    assert arith.solve(question) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "What is ?",
        "What is 1 +?",
        "What is 1 2?",
        "What is (1 + 2?",
        "What is 1 + 2)?",
        "What is 2 ** 3?",
        "What is 6 / 2?",
        "What is 1 + x?",
        "hello",
        "What is 1 + 2?? ",
        "What is 1.5 + 2?",
        "What is __import__('os')?",
        "What is \u0663 + 1?",  # an Arabic-Indic digit is not a world digit
        "What is " + "9" * 13 + "?",
        "What is " + "(" * 30 + "1" + ")" * 30 + "?",
        "What is " + "1+" * 150 + "1?",
    ],
)
def test_solve_malformed_is_none(text):
    assert arith.solve(text) is None


def test_solve_rejects_non_strings():
    assert arith.solve(None) is None  # type: ignore[arg-type]


def test_add_and_mul_steps_literal():
    assert arith.add_steps(47, 38) == "47+38: 7+8=15, 4+3=7, 7+1=8, so 85."
    assert arith.add_steps(12, 282) == "12+282: 2+2=4, 1+8=9, 0+2=2, so 294."
    assert arith.add_steps(95, 7) == "95+7: 5+7=12, 9+0=9, 9+1=10, so 102."
    assert arith.mul_steps(47, 6) == "47*6: 7*6=42, 4*6=24, 24+4=28, so 282."
    assert arith.mul_steps(90, 2) == "90*2: 0*2=0, 9*2=18, so 180."


def test_steps_products_before_sums():
    assert arith.steps([12, 47, 6], ["+", "*"]) == [
        "47*6: 7*6=42, 4*6=24, 24+4=28, so 282.",
        "12+47*6 = 12+282.",
        "12+282: 2+2=4, 1+8=9, 0+2=2, so 294.",
    ]
    assert arith.steps([47, 6, 12], ["*", "+"])[1] == "47*6+12 = 282+12."
    assert arith.steps([20, 3, 11, 2], ["*", "+", "*"])[2] == "20*3+11*2 = 60+22."
    assert len(arith.steps([12, 30], ["+"])) == 1  # no products, no substitution line
    # a one-digit left factor is worked with the digit second
    assert arith.steps([6, 47], ["*"]) == ["47*6: 7*6=42, 4*6=24, 24+4=28, so 282."]
    with pytest.raises(ValueError):
        arith.steps([1, 2], ["-"])


_leaf = st.integers(0, 999).map(lambda n: (str(n), n))


def _combine(children):
    def node(pair, op):
        (lt, lv), (rt, rv) = pair
        value = {"+": lv + rv, "-": lv - rv, "*": lv * rv}[op]
        return f"({lt} {op} {rt})", value

    return st.builds(node, st.tuples(children, children), st.sampled_from("+-*"))


@settings(max_examples=60, deadline=None)
@given(st.recursive(_leaf, _combine, max_leaves=8))
def test_solve_matches_tree_value(tree):
    text, value = tree
    assert arith.solve(f"What is {text}?") == value


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 999), min_size=1, max_size=4), st.data())
def test_steps_end_in_the_parser_value(operands, data):
    ops = data.draw(st.lists(st.sampled_from("+*"), min_size=len(operands) - 1, max_size=len(operands) - 1))
    text = str(operands[0]) + "".join(f" {op} {n}" for op, n in zip(ops, operands[1:]))
    lines = arith.steps(operands, ops)
    expected = arith.solve(text)
    if lines:
        assert lines[-1].endswith(f"so {expected}.")
    else:
        assert expected == operands[0]
