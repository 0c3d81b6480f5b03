"""QA prompts for both roles, and the Proposer-output parser with its validity gates.

What: `proposer_messages(passage)` asks for a question about a passage with a short answer and a few aliases, in
tags; `solver_messages(question)` asks for a closed-book short answer (no passage); `parse_qa_proposal(text,
passage)` returns a `QAProposal` that is valid or carries one reason of `INVALID_REASONS`, counted by the caller.
The `qa` domain runs the same checks as stages: `parse_qa_format`, then `size_reason`, `grounding_reason`,
`leak_reason`, `self_reference_reason`.

Gates (after the format checks, in this order; the first that fails is the reason):
- `answer_too_long` / `too_many_aliases` / `alias_too_long`: an answer is a span of at most `max_answer_tokens`
  normalised tokens, with at most `max_aliases` aliases;
- `not_grounded` / `alias_not_grounded`: the answer and each alias occur, normalised, as a contiguous run of the
  passage's normalised tokens (so the passage can vouch for them);
- `answer_leaked`: the answer or an alias occurs, normalised, in the question;
- `not_self_contained`: the question points at a text the closed-book Solver never sees ("the passage",
  "according to the text", "in the text above", ...; `SELF_REFERENCES`).

Why: the same style as the math parser (`pasodoble/core/prompts.py`): model output never raises, linear time in its
length, `max_chars` caps it. Aliases equal (normalised) to the answer or to each other are dropped, not rejected.

How to run: pure functions; `python -m pytest tests/qa/test_proposal.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pasodoble.qa.normalize import normalize

PROPOSER_TEMPLATE = (
    "You are the proposer in a proposer-solver game. Read the passage below and write one factual question whose "
    "answer the passage states. The solver will answer WITHOUT seeing the passage, so the question must stand on "
    "its own: name the people, places and things it asks about, and never refer to the passage or the text.\n\n"
    "Passage:\n{passage}\n\n"
    "Enclose the question in <question>...</question>. Then give the short answer (at most {max_answer_tokens} "
    "words), copied exactly from the passage, in <answer>...</answer>. You may add up to {max_aliases} other ways "
    "of writing the same answer that also appear in the passage, each in its own <alias>...</alias>."
)
PROPOSER_TEMPLATE_NO_PASSAGE = (  # the no-knowledge ablation: nothing to ground the answer in
    "You are the proposer in a proposer-solver game. Write one factual question whose answer you know. The question "
    "must stand on its own: name the people, places and things it asks about.\n\n"
    "Enclose the question in <question>...</question>. Then give the short answer (at most {max_answer_tokens} "
    "words) in <answer>...</answer>. You may add up to {max_aliases} other ways of writing the same answer, each "
    "in its own <alias>...</alias>."
)
SOLVER_TEMPLATE = (
    "Answer the question with a short answer of a few words, without explanation.\n"
    "Question: {question}\n"
    "Reply in the form: Answer: <short answer>"
)

INVALID_REASONS = (
    "not_text",
    "too_long",
    "no_question_tag",
    "empty_question",
    "no_answer_tag",
    "empty_answer",
    "answer_too_long",
    "too_many_aliases",
    "alias_too_long",
    "not_grounded",
    "alias_not_grounded",
    "answer_leaked",
    "not_self_contained",
)

SELF_REFERENCES = (
    "the passage",
    "this passage",
    "the text",
    "this text",
    "the article",
    "this article",
    "the document",
    "this document",
    "the excerpt",
    "the paragraph",
    "the given context",
    "the context above",
    "the text above",
    "the above",
    "according to the",
    "mentioned above",
    "described above",
    "stated above",
    "as stated",
    "the author",
)
_SELF_REFERENCE_RE = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in SELF_REFERENCES) + r")\b")


@dataclass(frozen=True)
class QAProposal:
    question: str | None  # text inside <question>...</question>, stripped (None if not found)
    answer: str | None  # text inside <answer>...</answer>, stripped
    aliases: tuple[str, ...]  # other forms of the answer, deduplicated after normalisation
    invalid_reason: str | None  # None when valid; else one of INVALID_REASONS

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None

    @property
    def golds(self) -> tuple[str, ...]:
        """The answer and its aliases: what the checker compares a Solver's answer with."""
        return ((self.answer,) if self.answer else ()) + self.aliases


@dataclass(frozen=True)
class QAGates:
    max_answer_tokens: int = 8  # longest answer or alias, in normalised tokens
    max_aliases: int = 3  # most aliases a proposal may give
    rule: str = "canonical"  # normalisation of the grounding and leak tests (normalize.RULES)


def proposer_messages(passage: str, gates: QAGates = QAGates(), system: str | None = None) -> list[dict]:
    """Chat messages asking the Proposer for a question about `passage`."""
    user = (
        PROPOSER_TEMPLATE.replace("{max_answer_tokens}", str(gates.max_answer_tokens))
        .replace("{max_aliases}", str(gates.max_aliases))
        .replace("{passage}", passage)
    )
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def solver_messages(question: str, system: str | None = None) -> list[dict]:
    """Chat messages asking the Solver for a closed-book answer (the passage is not shown)."""
    user = SOLVER_TEMPLATE.replace("{question}", question)
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def _tagged_all(text: str, tag: str, start: int) -> list[tuple[str, int]]:
    """(content, end) of every <tag>...</tag> at or after `start`, left to right; linear in the text."""
    found, opening, closing = [], f"<{tag}>", f"</{tag}>"
    while (opened := text.find(opening, start)) >= 0:
        closed = text.find(closing, opened + len(opening))
        if closed < 0:
            break
        found.append((text[opened + len(opening) : closed], closed + len(closing)))
        start = closed + len(closing)
    return found


def _is_text(text: object) -> bool:
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def _occurs(needle: str, haystack: str) -> bool:
    """Whether normalised `needle` is a contiguous run of the words of normalised `haystack`."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def _body(text: str) -> str | None:
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :]
    return None if "<think>" in text else text


def parse_qa_format(text: str, gates: QAGates = QAGates(), *, max_chars: int = 20_000) -> QAProposal:
    """The format checks alone (tags, empty parts; `not_text` ... `empty_answer`); the gates come after."""
    if not _is_text(text):
        return QAProposal(None, None, (), "not_text")
    if len(text) > max_chars:
        return QAProposal(None, None, (), "too_long")
    body = _body(text)
    tagged = _tagged_all(body, "question", 0)[:1] if body is not None else []
    if not tagged:
        return QAProposal(None, None, (), "no_question_tag")
    question, after = tagged[0][0].strip(), tagged[0][1]
    if not question:
        return QAProposal(question, None, (), "empty_question")
    answers = _tagged_all(body, "answer", after)[:1]
    if not answers:
        return QAProposal(question, None, (), "no_answer_tag")
    answer = answers[0][0].strip()
    norm = normalize(answer, gates.rule)
    if not norm:
        return QAProposal(question, answer, (), "empty_answer")
    aliases, seen = [], {norm}
    for alias, _ in _tagged_all(body, "alias", answers[0][1]):
        alias_norm = normalize(alias, gates.rule)
        if alias_norm and alias_norm not in seen:
            seen.add(alias_norm)
            aliases.append(alias.strip())
    return QAProposal(question, answer, tuple(aliases), None)


def size_reason(proposal: QAProposal, gates: QAGates = QAGates()) -> str | None:
    """Gate stage: the answer and each alias are short spans, and there are few aliases."""
    norms = [normalize(g, gates.rule) for g in proposal.golds]
    if len(norms[0].split()) > gates.max_answer_tokens:
        return "answer_too_long"
    if len(norms) - 1 > gates.max_aliases:
        return "too_many_aliases"
    if any(len(a.split()) > gates.max_answer_tokens for a in norms[1:]):
        return "alias_too_long"
    return None


def grounding_reason(proposal: QAProposal, passage: str, gates: QAGates = QAGates()) -> str | None:
    """Gate stage: the answer and each alias are runs of whole normalised words of the passage."""
    passage_norm = normalize(passage, gates.rule)
    norms = [normalize(g, gates.rule) for g in proposal.golds]
    if not _occurs(norms[0], passage_norm):
        return "not_grounded"
    if not all(_occurs(a, passage_norm) for a in norms[1:]):
        return "alias_not_grounded"
    return None


def leak_reason(proposal: QAProposal, gates: QAGates = QAGates()) -> str | None:
    """Gate stage: neither the answer nor an alias occurs, normalised, in the question."""
    question_norm = normalize(proposal.question, gates.rule)
    leaked = any(_occurs(normalize(g, gates.rule), question_norm) for g in proposal.golds)
    return "answer_leaked" if leaked else None


def self_reference_reason(proposal: QAProposal) -> str | None:
    """Gate stage: the question does not point at a text the closed-book Solver never sees."""
    found = _SELF_REFERENCE_RE.search(" ".join(proposal.question.lower().split()))
    return "not_self_contained" if found else None


def parse_qa_proposal(
    text: str, passage: str, gates: QAGates = QAGates(), *, max_chars: int = 20_000
) -> QAProposal:
    """Parse a Proposer completion and apply the QA validity gates in order; never raises on model output."""
    proposal = parse_qa_format(text, gates, max_chars=max_chars)
    if not proposal.valid:
        return proposal
    for reason in (
        size_reason(proposal, gates),
        grounding_reason(proposal, passage, gates),
        leak_reason(proposal, gates),
        self_reference_reason(proposal),
    ):
        if reason is not None:
            return QAProposal(proposal.question, proposal.answer, proposal.aliases, reason)
    return proposal


def qa_metrics(
    proposals: list[QAProposal], solver_answers: list[str | None], rule: str = "canonical"
) -> dict:
    """QA counters of one step: valid fraction, each invalid reason, answer and alias sizes, empty Solver answers.

    `solver_answers` are the Solver's extracted answers (None: none found); an answer that normalises to nothing
    counts as empty too (the reward-hacking signal of substring rewards).
    """
    valid = [p for p in proposals if p.valid]
    out = {
        "proposer/valid/fraction": len(valid) / len(proposals) if proposals else 0.0,
        "proposer/answer_tokens/mean": (
            sum(len(normalize(p.answer, rule).split()) for p in valid) / len(valid) if valid else 0.0
        ),
        "proposer/aliases/mean": sum(len(p.aliases) for p in valid) / len(valid) if valid else 0.0,
        "solver/empty_answer/fraction": (
            sum(not a or not normalize(a, rule) for a in solver_answers) / len(solver_answers)
            if solver_answers
            else 0.0
        ),
    }
    for reason in INVALID_REASONS:
        count = sum(p.invalid_reason == reason for p in proposals)
        if count:
            out[f"proposer/invalid/{reason}"] = float(count)
    return out
