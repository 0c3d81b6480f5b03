"""The label check: integer arithmetic questions computed from their `ast`, everything else refused unevaluated."""

from __future__ import annotations

import random

import pytest

from pasodoble.core.prompts import Proposal
from pasodoble.domains import get_domain
from pasodoble.domains.label_check import MAX_ABS, arithmetic_value, label_verdict, operand_count
from pasodoble.domains.labels import LabelConfig, label_step


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("What is 12 + 47 * 6?", 294),
        ("What is 38 + 47 * 6?", 320),
        ("Compute (3 - 10) * 4.", -28),
        ("17 // 5 = ?", 3),
        ("-7 // 2", -4),
        ("What is 2 * 3 + 4 * 5?", 26),
    ],
)
def test_values_of_integer_expressions(question, value):
    assert arithmetic_value(question) == value


@pytest.mark.parametrize(
    "question",
    [
        "What is x + 1?",  # a name
        "What is abs(-3)?",  # a call
        "What is 1.5 + 2?",  # a float
        "What is 2 ** 10?",  # a power
        "What is 9**9**9?",  # a power tower: refused, never computed
        "What is 7 / 2?",  # true division
        "What is 5 // 0?",  # division by zero
        "What is 5 // (3 - 3)?",
        "What is True + 1?",  # a bool literal
        "What is 'a' * 3?",
        "What is [1] * 3?",
        "How many apples are left?",
        "What is 3 + ?",  # not an expression
        "",
    ],
)
def test_refused_shapes(question):
    assert arithmetic_value(question) is None
    assert label_verdict(question, "3") is None


def test_huge_numbers_are_refused_not_computed():
    big = 10**17
    assert arithmetic_value(f"{big} * 9") == 9 * big  # within the bound
    assert arithmetic_value(f"{big} * {big}") is None  # intermediate past MAX_ABS
    assert arithmetic_value(str(MAX_ABS + 1)) is None  # literal past MAX_ABS
    assert arithmetic_value(" * ".join(["999999999"] * 30)) is None  # long product
    assert arithmetic_value("-(" * 40 + "1" + ")" * 40) is None  # too deep (parentheses alone add no node)
    assert arithmetic_value(" + ".join(["1"] * 60)) is None  # too many nodes
    assert arithmetic_value("1" * 5000) is None  # too long a text


def test_label_verdicts():
    assert label_verdict("What is 12 + 47 * 6?", "294") is True
    assert label_verdict("What is 12 + 47 * 6?", " 294 ") is True
    assert label_verdict("What is 12 + 47 * 6?", "295") is False
    assert label_verdict("What is 12 + 47 * 6?", "\\frac{1}{2}") is False  # checkable question, not its value
    assert label_verdict("What is 3 - 10?", "-7") is True
    assert operand_count("What is 12 + 47 * 6?") == 3
    assert operand_count("What is x?") is None


def test_math_domain_checks_labels():
    domain = get_domain("math")
    assert domain.check_label("What is 2 + 2?", "4") is True
    assert domain.check_label("What is 2 + 2?", "5") is False
    assert "wrong_label" in domain.invalid_reasons


def _proposals():
    return [
        Proposal("What is 2 + 2?", "4", None),
        Proposal("What is 10 * 3?", "31", None),
        Proposal("Name a prime.", "7", None),
        Proposal(None, None, "no_problem_tag"),
    ]


def test_label_step_measures_before_the_gate_check_off():
    out, metrics = label_step(get_domain("math"), _proposals(), LabelConfig(), random.Random(0))
    assert [p.invalid_reason for p in out] == [
        None,
        None,
        None,
        "no_problem_tag",
    ]  # check off: nothing rejected
    assert metrics["proposer/label/checkable"] == pytest.approx(2 / 3)
    assert metrics["proposer/label/correct"] == 0.5
    assert metrics["proposer/operands/2"] == 1.0


def test_label_step_check_on_rejects_wrong_labels():
    out, metrics = label_step(get_domain("math"), _proposals(), LabelConfig(check=True), random.Random(0))
    assert [p.invalid_reason for p in out] == [None, "wrong_label", None, "no_problem_tag"]
    assert metrics["proposer/label/correct"] == 0.5  # measured before the check


def test_label_noise_makes_labels_wrong():
    props = [Proposal(f"What is {i} + 1?", str(i + 1), None) for i in range(400)]
    out, metrics = label_step(get_domain("math"), props, LabelConfig(noise=0.5), random.Random(1))
    assert 0.4 < metrics["proposer/label/noised"] < 0.6
    assert metrics["proposer/label/correct"] == pytest.approx(1 - metrics["proposer/label/noised"])
    assert sum(p.answer != q.answer for p, q in zip(out, props)) == round(
        400 * metrics["proposer/label/noised"]
    )


def test_label_noise_is_validated():
    from pasodoble.errors import ConfigError

    with pytest.raises(ConfigError):
        LabelConfig(noise=1.5).validate()


def test_shares_without_a_denominator_are_left_out():
    props = [Proposal("Name a prime.", "7", None), Proposal(None, None, "no_problem_tag")]
    _, metrics = label_step(get_domain("math"), props, LabelConfig(), random.Random(0))
    assert metrics == {"proposer/label/checkable": 0.0, "proposer/label/noised": 0.0}
    _, none_valid = label_step(get_domain("math"), props[1:], LabelConfig(), random.Random(0))
    assert none_valid == {}
