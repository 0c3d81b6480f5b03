"""The QA Proposer parser and its gates: grounding, leak, self-containment, sizes; every reject has a reason."""

import pytest

from pasodoble.qa.proposal import (
    INVALID_REASONS,
    QAGates,
    parse_qa_proposal,
    proposer_messages,
    qa_metrics,
    solver_messages,
)

PASSAGE = (
    "The river Velmora rises in the Tarsk Hills and flows 1,200 kilometres to the port of Osk. "
    "Its delta was first mapped in 1843 by Ilse Varga, called the Mapmaker of Osk."
)


def tagged(question, answer, *aliases):
    return f"<question>{question}</question><answer>{answer}</answer>" + "".join(
        f"<alias>{a}</alias>" for a in aliases
    )


def test_a_good_proposal_with_aliases():
    text = "<think>plan</think>" + tagged(
        "Who first mapped the delta of the river Velmora?", "Ilse Varga", "the Mapmaker of Osk", "ILSE VARGA"
    )
    proposal = parse_qa_proposal(text, PASSAGE)
    assert proposal.valid, proposal.invalid_reason
    assert proposal.aliases == ("the Mapmaker of Osk",)  # the upper-case copy of the answer is dropped
    assert proposal.golds == ("Ilse Varga", "the Mapmaker of Osk")
    numeric = parse_qa_proposal(tagged("How long is the river Velmora, in kilometres?", "1200"), PASSAGE)
    assert numeric.valid  # "1,200" in the passage grounds "1200" once numbers are canonical


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (b"bytes", "not_text"),
        ("x" * 30_000, "too_long"),
        ("Who mapped it? Ilse Varga", "no_question_tag"),
        ("<think>" + tagged("Who mapped the delta?", "Ilse Varga"), "no_question_tag"),
        (tagged("  ", "Ilse Varga"), "empty_question"),
        ("<question>Who mapped the delta of the Velmora?</question> Ilse Varga", "no_answer_tag"),
        (tagged("Who mapped the delta of the Velmora?", " the "), "empty_answer"),
        (
            tagged("Where does the Velmora flow?", "1,200 kilometres to the port of Osk and more and more"),
            "answer_too_long",
        ),
        (
            tagged(
                "Who mapped the Velmora delta?", "Ilse Varga", "Varga", "Ilse", "Mapmaker of Osk", "Mapmaker"
            ),
            "too_many_aliases",
        ),
        (
            tagged(
                "Who mapped the Velmora delta?",
                "Ilse Varga",
                "Ilse Varga called the Mapmaker of Osk its delta was first",
            ),
            "alias_too_long",
        ),
        (tagged("Who mapped the Velmora delta?", "Ilse Vargas"), "not_grounded"),  # a word, not a substring
        (tagged("Who mapped the Velmora delta?", "Ilse Varga", "Varga the Great"), "alias_not_grounded"),
        (tagged("Did Ilse Varga map the Velmora delta first?", "Ilse Varga"), "answer_leaked"),
        (
            tagged("Which title did Varga hold, the Mapmaker of Osk?", "Ilse Varga", "Mapmaker of Osk"),
            "answer_leaked",
        ),
        (tagged("According to the passage, who mapped the delta?", "Ilse Varga"), "not_self_contained"),
        (tagged("Who mapped the delta mentioned in the text above?", "Ilse Varga"), "not_self_contained"),
    ],
)
def test_each_reject_has_its_reason(text, reason):
    proposal = parse_qa_proposal(text, PASSAGE)
    assert proposal.invalid_reason == reason and reason in INVALID_REASONS


def test_gates_are_configurable():
    text = tagged("Where does the Velmora flow?", "to the port of Osk")
    assert parse_qa_proposal(text, PASSAGE).valid
    assert parse_qa_proposal(text, PASSAGE, QAGates(max_answer_tokens=2)).invalid_reason == "answer_too_long"


def test_hostile_output_is_linear_and_never_raises():
    many = "<alias>" * 100_000 + "<question>" * 100_000
    assert parse_qa_proposal(many[:19_000], PASSAGE).invalid_reason == "no_question_tag"
    stuffed = tagged("Who mapped it?", "Ilse Varga") + "".join(f"<alias>x{i}</alias>" for i in range(1000))
    assert parse_qa_proposal(stuffed, PASSAGE).invalid_reason == "too_many_aliases"


def test_prompts_hide_the_passage_from_the_solver():
    proposer = proposer_messages(PASSAGE, system="be brief")
    assert proposer[0] == {"role": "system", "content": "be brief"} and PASSAGE in proposer[1]["content"]
    assert "at most 8 words" in proposer[1]["content"] and "up to 3" in proposer[1]["content"]
    solver = solver_messages("Who mapped the Velmora delta?")
    assert len(solver) == 1 and "Velmora" in solver[0]["content"] and "Osk" not in solver[0]["content"]


def test_metrics_count_reasons_lengths_and_empty_answers():
    proposals = [
        parse_qa_proposal(tagged("Who mapped the Velmora delta?", "Ilse Varga", "Mapmaker of Osk"), PASSAGE),
        parse_qa_proposal(tagged("According to the text, who?", "Ilse Varga"), PASSAGE),
        parse_qa_proposal("nothing", PASSAGE),
    ]
    metrics = qa_metrics(proposals, ["Ilse Varga", "", None, "The"])
    assert metrics["proposer/valid/fraction"] == pytest.approx(1 / 3)
    assert metrics["proposer/invalid/not_self_contained"] == 1.0
    assert metrics["proposer/invalid/no_question_tag"] == 1.0
    assert metrics["proposer/answer_tokens/mean"] == 2.0 and metrics["proposer/aliases/mean"] == 1.0
    assert metrics["solver/empty_answer/fraction"] == 0.75
