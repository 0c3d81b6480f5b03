"""Prompts and the Proposer parser: literal edge cases, the leak test, and a never-raises property test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pasodoble.core.prompts import (
    INVALID_REASONS,
    PromptConfig,
    Proposal,
    answer_leaked,
    last_boxed,
    parse_proposal,
    proposer_messages,
    solver_messages,
)
from pasodoble.errors import ConfigError

CFG = PromptConfig()


def good(question: str = "What is $3 \\cdot 21$?", answer: str = "63") -> str:
    return f"<problem>{question}</problem><answer>3 * 21 = 63, so \\boxed{{{answer}}}</answer>"


# ---- messages


def test_proposer_messages_with_and_without_passage():
    msgs = proposer_messages("Primes have two divisors; \\{x\\}.", CFG)
    assert [m["role"] for m in msgs] == ["user"]
    assert "Primes have two divisors; \\{x\\}." in msgs[0]["content"]
    assert "{passage}" not in msgs[0]["content"]
    assert "\\boxed{}" in msgs[0]["content"]  # template braces survive rendering
    no_passage = proposer_messages(None, CFG)
    assert no_passage[0]["content"] == CFG.proposer_template_no_passage
    cfg = PromptConfig(proposer_system="You propose.", solver_system="You solve.")
    assert proposer_messages("p", cfg)[0] == {"role": "system", "content": "You propose."}


def test_solver_messages():
    msgs = solver_messages("What is {x} + 1?", CFG)
    assert msgs == [
        {
            "role": "user",
            "content": "What is {x} + 1?\nPlease reason step by step, and put your final answer within \\boxed{}.",
        }
    ]


def test_messages_work_with_a_chat_template(tiny_lm):
    _, tokenizer, _ = tiny_lm
    text = tokenizer.apply_chat_template(
        solver_messages("1+1?", CFG), tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>user\n1+1?\n") and text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("proposer_template", "Write a problem."),
        ("proposer_template_no_passage", "Use {passage}."),
        ("solver_template", "Solve it."),
    ],
)
def test_validate_placeholders(field, value):
    with pytest.raises(ConfigError) as err:
        PromptConfig(**{field: value}).validate()
    assert err.value.where == f"prompts.{field}"


def test_validate_defaults():
    PromptConfig().validate()


# ---- boxed extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{\\frac{63}{400}}", "\\frac{63}{400}"),
        ("a \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not count
        ("\\boxed {x^{2}}", "x^{2}"),
        ("\\fbox{7}", "7"),
        ("\\boxed{3} \\boxed{4", "3"),  # the last one is unbalanced: fall back to the last balanced one
        ("\\boxed{\\boxed{1}}", "1"),  # nested: the inner box (the grader's rule)
        ("\\boxed{", None),
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


# ---- parse_proposal


def test_valid_proposal():
    assert parse_proposal(good()) == Proposal("What is $3 \\cdot 21$?", "63", None)


def test_nested_braces_answer():
    text = "<problem>Find p.</problem><answer>so \\boxed{\\frac{63}{400}}</answer>"
    assert parse_proposal(text) == Proposal("Find p.", "\\frac{63}{400}", None)


def test_last_boxed_inside_answer_only():
    text = "<problem>Find y.</problem>\\boxed{9}<answer>first \\boxed{1}, finally \\boxed{ 2 }</answer>\\boxed{8}"
    assert parse_proposal(text).answer == "2"


def test_think_part_with_fake_problem_is_ignored():
    text = "<think>draft: <problem>fake 2+2?</problem><answer>\\boxed{4}</answer></think>" + good()
    assert parse_proposal(text) == Proposal("What is $3 \\cdot 21$?", "63", None)


def test_unclosed_think_means_no_question():
    assert parse_proposal("<think>" + good()).invalid_reason == "no_problem_tag"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no_problem_tag"),
        ("just some text \\boxed{3}", "no_problem_tag"),
        ("<problem>What?", "no_problem_tag"),
        ("<problem>   </problem><answer>\\boxed{1}</answer>", "empty_question"),
        ("<problem>What is 1+1?</problem> the answer is 2", "no_answer_tag"),
        ("<problem>What is 1+1?</problem><answer>\\boxed{2}", "no_answer_tag"),  # truncated
        (
            "<answer>\\boxed{2}</answer><problem>What is 1+1?</problem>",
            "no_answer_tag",
        ),  # answer before problem
        ("<problem>What is 1+1?</problem><answer>it is 2</answer>", "no_boxed_answer"),
        ("<problem>What is 1+1?</problem><answer>\\boxed{2</answer>", "no_boxed_answer"),  # unbalanced
        ("<problem>What is 1+1?</problem><answer>\\boxed{ }</answer>", "empty_answer"),
        ("<problem>Is \\boxed{x} 3?</problem><answer>\\boxed{7}</answer>", "boxed_in_question"),
        ("<problem>What is 5+7? (answer: 12)</problem><answer>\\boxed{12}</answer>", "answer_leaked"),
    ],
)
def test_invalid_proposals(text, reason):
    proposal = parse_proposal(text)
    assert proposal.invalid_reason == reason
    assert reason in INVALID_REASONS and not proposal.valid


def test_invalid_proposal_keeps_what_was_parsed():
    proposal = parse_proposal("<problem>What is 5+7? (answer: 12)</problem><answer>\\boxed{12}</answer>")
    assert (proposal.question, proposal.answer) == ("What is 5+7? (answer: 12)", "12")


def test_garbage_inputs_never_raise():
    assert parse_proposal("x" * 1_000_000).invalid_reason == "too_long"
    assert parse_proposal(good() + "x" * 30, max_chars=40).invalid_reason == "too_long"
    assert parse_proposal("<problem>a\ud800b</problem>").invalid_reason == "not_text"  # lone surrogate
    assert parse_proposal("<problem>a\x00</problem>").invalid_reason == "not_text"
    assert parse_proposal(None).invalid_reason == "not_text"  # type: ignore[arg-type]
    # pathological repeats (an RL policy in a loop) stay linear-time and end with a reason
    assert parse_proposal("<problem>" * 2000).invalid_reason == "no_problem_tag"
    assert parse_proposal("<problem>Q?</problem>" + "<answer>" * 2000).invalid_reason == "no_answer_tag"
    unclosed = "<problem>Q?</problem><answer>" + "\\boxed{" * 2000 + "</answer>"
    assert parse_proposal(unclosed).invalid_reason == "no_boxed_answer"
    nested = "<problem>Q?</problem><answer>" + "\\boxed{" * 2000 + "7" + "}" * 2000 + "</answer>"
    assert parse_proposal(nested).answer == "7"  # nested boxes: the innermost content, read in linear time


# ---- answer_leaked


@pytest.mark.parametrize(
    ("question", "answer", "leaked"),
    [
        ("What is 12 + 3?", "2", False),  # the reference's substring test would call this leaked
        ("What is 5+7? (answer: 12)", "12", True),
        ("Show that half of one is 1/2.", "\\frac{1}{2}", True),
        ("Show that half of one is \\dfrac12.", "1/2", True),
        ("What is 1/20 of 10?", "\\frac{1}{2}", False),
        ("A farm has 1,000 cows; the answer is 1000.", "1000", True),
        ("Compute 12.0 - 3.", "12", True),
        ("Compute 3 - 3.", "-3", False),  # binary minus is not a negative number
        ("Solve: x = -3 is the root of what?", "-3", True),
        ("Find $x$ if $2x = 10$.", "x = 5", False),
        ("Evaluate \\left( 2 \\right) + 1.", "(2)", True),
        ("Is the answer \\text{yes}?", "\\text{Yes}", True),
        ("Find n.", "$$", False),
    ],
)
def test_answer_leaked(question, answer, leaked):
    assert answer_leaked(question, answer) is leaked


# ---- property: parse_proposal never raises, and a valid result satisfies the gate

FRAGMENTS = st.sampled_from(
    [
        "<problem>",
        "</problem>",
        "<answer>",
        "</answer>",
        "<think>",
        "</think>",
        "\\boxed{",
        "\\fbox{",
        "{",
        "}",
        "\\",
        "12",
        "x",
        " ",
        "\n",
        "\ud800",
        "\x00",
        "é",
    ]
)
TEXTS = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=300),
    st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_parse_proposal_never_raises(text):
    proposal = parse_proposal(text)
    assert proposal.invalid_reason is None or proposal.invalid_reason in INVALID_REASONS
    if proposal.valid:
        assert proposal.question and proposal.answer
        assert "\\boxed" not in proposal.question
        assert not answer_leaked(proposal.question, proposal.answer)
