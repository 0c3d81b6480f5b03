"""Prompts for both roles and the Proposer-output parser with its validity gate.

What: chat messages for the Proposer (from a knowledge passage, or none for the no-knowledge ablation) and for the
Solver (from a question); `parse_proposal` turns a Proposer completion into (question, answer) or an invalid
reason; `answer_leaked` is the leak test of the validity gate (docs/METHOD.md steps 3 and 5).

Why: every Proposer reward starts here, so malformed model output (no tags, unbalanced braces, huge or non-text
output) must end as an *invalid proposal with a reason* that the loop counts, never as an exception, and in time
linear in its length (tags are found with `str.find` from where the last search ended, boxes with the grader's
one-pass brace matcher, the leak test with a linear token search); `max_chars` caps the input on top of that.

How to run: pure functions; `python -m pytest tests/core/test_prompts.py`.

Departures from the reference code:
- Templates are rendered with `str.replace` on the `{passage}` / `{question}` placeholders, not `str.format`, so
  LaTeX braces (`\\boxed{}`) in templates or passages need no escaping.
- The reference looks for `<problem>` only after a closing `</think>` and finds nothing when there is none; here a
  completion without a thinking part is parsed whole (base and SFT models do not think), while an unclosed
  `<think>` means no question.
- The leak test is token-level on normalised text (`\\frac{1}{2}` == `1/2`, `1,000` == `1000`), not a substring
  test: answer "2" does not leak into "What is 12 + 3?". It still flags a question that merely mentions the
  answer's number (gcd of 12 and 36 is 12); that is the price of catching "(answer: 12)".
- The Solver prompt asks for a final `\\boxed{}` answer (the grader's format) rather than `<answer>` tags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pasodoble.errors import ConfigError
from pasodoble.grader.extract import extract_boxed

DEFAULT_PROPOSER_TEMPLATE = (
    "You are the proposer in a proposer-solver game. Your task is to create a challenging, well-structured, "
    "diverse, and unambiguous mathematical problem that has a verifiable answer, using the external knowledge "
    "below as context.\n\n"
    "External knowledge:\n{passage}\n\n"
    "Enclose the problem statement within <problem>...</problem> tags. Provide a detailed step-by-step solution, "
    "including a brief verification, within <answer>...</answer> tags. The final answer to the problem must be "
    "enclosed in \\boxed{} inside the <answer> section."
)
DEFAULT_PROPOSER_TEMPLATE_NO_PASSAGE = (
    "You are the proposer in a proposer-solver game. Your task is to create a challenging, well-structured, "
    "diverse, and unambiguous mathematical problem that has a verifiable answer.\n\n"
    "Enclose the problem statement within <problem>...</problem> tags. Provide a detailed step-by-step solution, "
    "including a brief verification, within <answer>...</answer> tags. The final answer to the problem must be "
    "enclosed in \\boxed{} inside the <answer> section."
)
DEFAULT_SOLVER_TEMPLATE = (
    "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
)


@dataclass
class PromptConfig:
    proposer_system: str | None = None  # system message for the Proposer (None: none)
    proposer_template: str = DEFAULT_PROPOSER_TEMPLATE  # Proposer user message; must contain {passage}
    proposer_template_no_passage: str = DEFAULT_PROPOSER_TEMPLATE_NO_PASSAGE  # no-knowledge ablation message
    solver_system: str | None = None  # system message for the Solver (None: none)
    solver_template: str = DEFAULT_SOLVER_TEMPLATE  # Solver user message; must contain {question}

    def validate(self) -> None:
        if "{passage}" not in self.proposer_template:
            raise ConfigError(
                "prompts.proposer_template", "must contain {passage} where the knowledge passage goes"
            )
        if "{passage}" in self.proposer_template_no_passage:
            raise ConfigError(
                "prompts.proposer_template_no_passage", "must not contain {passage}: it is used without one"
            )
        if "{question}" not in self.solver_template:
            raise ConfigError("prompts.solver_template", "must contain {question} where the question goes")


def _messages(system: str | None, user: str) -> list[dict[str, str]]:
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": user}]


def proposer_messages(passage: str | None, cfg: PromptConfig) -> list[dict[str, str]]:
    """Chat messages asking the Proposer for a question; `passage=None` uses the no-passage template."""
    if passage is None:
        return _messages(cfg.proposer_system, cfg.proposer_template_no_passage)
    return _messages(cfg.proposer_system, cfg.proposer_template.replace("{passage}", passage))


def solver_messages(question: str, cfg: PromptConfig) -> list[dict[str, str]]:
    """Chat messages asking the Solver to answer `question`."""
    return _messages(cfg.solver_system, cfg.solver_template.replace("{question}", question))


INVALID_REASONS = (
    "no_problem_tag",
    "empty_question",
    "no_answer_tag",
    "no_boxed_answer",
    "empty_answer",
    "boxed_in_question",
    "answer_leaked",
    "too_long",
    "not_text",
)


@dataclass(frozen=True)
class Proposal:
    question: str | None  # text inside <problem>...</problem>, stripped (None if not found)
    answer: str | None  # content of the last balanced \boxed{} inside <answer>...</answer>, stripped
    invalid_reason: str | None  # None when valid; else one of INVALID_REASONS

    @property
    def valid(self) -> bool:
        return self.invalid_reason is None


_BOX_WORD_RE = re.compile(r"\\(?:boxed|fbox)")


def last_boxed(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` / `\\fbox{...}` (unstripped), or None.

    The grader's extractor, so a Proposer's answer and a Solver's answer are read by one implementation; of nested
    boxes the inner one wins (`\\boxed{\\boxed{1}}` -> `1`).
    """
    return extract_boxed(text, "last")


def _strip_thinking(text: str) -> str | None:
    """The part after the thinking block; None if a `<think>` was opened and never closed."""
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :]
    if "<think>" in text:
        return None
    return text


def _tagged(text: str, tag: str, start: int = 0) -> tuple[str, int] | None:
    """(content, end) of the first <tag>...</tag> at or after `start`; str.find keeps it linear on any input."""
    opened = text.find(f"<{tag}>", start)
    if opened < 0:
        return None
    content_start = opened + len(tag) + 2
    closed = text.find(f"</{tag}>", content_start)
    if closed < 0:
        return None
    return text[content_start:closed], closed + len(tag) + 3


def _is_text(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes that were never valid UTF-8
        return False
    return "\x00" not in text


def parse_proposal(text: str, *, max_chars: int = 20_000) -> Proposal:
    """Parse a Proposer completion and apply the validity gate; never raises on model output."""
    proposal = parse_tags(text, max_chars=max_chars)
    if proposal.invalid_reason is not None:
        return proposal
    reason = box_in_question_reason(proposal) or leak_reason(proposal)
    return proposal if reason is None else Proposal(proposal.question, proposal.answer, reason)


def parse_tags(text: str, *, max_chars: int = 20_000) -> Proposal:
    """The parse alone: tags, thinking part and boxed answer; the content checks of the gate come after."""
    if not _is_text(text):
        return Proposal(None, None, "not_text")
    if len(text) > max_chars:
        return Proposal(None, None, "too_long")
    body = _strip_thinking(text)
    problem = _tagged(body, "problem") if body is not None else None
    if problem is None:
        return Proposal(None, None, "no_problem_tag")
    question = problem[0].strip()
    if not question:
        return Proposal(question, None, "empty_question")
    answer_part = _tagged(body, "answer", problem[1])
    if answer_part is None:
        return Proposal(question, None, "no_answer_tag")
    boxed = last_boxed(answer_part[0])
    if boxed is None:
        return Proposal(question, None, "no_boxed_answer")
    answer = boxed.strip()
    if not answer:
        return Proposal(question, answer, "empty_answer")
    return Proposal(question, answer, None)


def box_in_question_reason(proposal: Proposal) -> str | None:
    """Gate stage: a question that holds a box hands the Solver a formatted answer."""
    return "boxed_in_question" if _BOX_WORD_RE.search(proposal.question) else None


def leak_reason(proposal: Proposal) -> str | None:
    """Gate stage: the answer's tokens appear in the question (`answer_leaked`)."""
    return "answer_leaked" if answer_leaked(proposal.question, proposal.answer) else None


_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT_RE = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")
_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_DROP_RE = re.compile(r"\\left|\\right|\\[,;:! ]|\\displaystyle|\$")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER_RE = re.compile(r"\d*\.\d+|\d+")
_TOKEN_RE = re.compile(r"\d*\.\d+|\d+|[a-z]+|\\[a-z]+|\S", re.IGNORECASE)
_OPERAND_END = re.compile(r"[\w)\]}]")


def _frac_repl(match: re.Match) -> str:
    num, den = match.group(1).strip(), match.group(2).strip()
    num = num if re.fullmatch(r"\w+", num) else f"({num})"
    den = den if re.fullmatch(r"\w+", den) else f"({den})"
    return f"{num}/{den}"


def _canonical_number(token: str) -> str:
    if "." in token:
        token = token.rstrip("0").rstrip(".")
    whole, dot, frac = token.partition(".")
    return (whole.lstrip("0") or "0") + dot + frac


def normalized_tokens(text: str) -> list[str]:
    """Tokens of `text` after light LaTeX normalisation; a minus sign opening a number joins it ("-3")."""
    text = _DROP_RE.sub(" ", text)
    text = _TEXT_RE.sub(r" \1 ", text)
    text = _FRAC_RE.sub(_frac_repl, text)
    text = _FRAC_SHORT_RE.sub(r"\1/\2", text)
    text = _THOUSANDS_RE.sub("", text).lower()
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(text):
        token = match.group(0)
        if _NUMBER_RE.fullmatch(token):
            token = _canonical_number(token)
            after_operand = len(tokens) >= 2 and _OPERAND_END.match(tokens[-2][-1])
            if tokens and tokens[-1] == "-" and not after_operand:
                tokens.pop()
                token = "-" + token
        tokens.append(token)
    return tokens


def _contains(haystack: list[str], needle: list[str]) -> bool:
    """Whether `needle` is a contiguous run of `haystack`; Knuth-Morris-Pratt, so linear on any tokens (comparing a
    slice at every offset is quadratic: a 10 KB question of ones against an answer of ones and a two)."""
    if not needle:
        return True
    fallback = [0] * len(needle)  # fallback[i]: length of the longest proper border of needle[: i + 1]
    border = 0
    for i in range(1, len(needle)):
        while border and needle[i] != needle[border]:
            border = fallback[border - 1]
        if needle[i] == needle[border]:
            border += 1
        fallback[i] = border
    matched = 0
    for token in haystack:
        while matched and token != needle[matched]:
            matched = fallback[matched - 1]
        if token == needle[matched]:
            matched += 1
            if matched == len(needle):
                return True
    return False


def answer_leaked(question: str, answer: str) -> bool:
    """True when the normalised answer's tokens appear as a contiguous run of the question's tokens."""
    needle = normalized_tokens(answer)
    if not needle:
        return False
    return _contains(normalized_tokens(question), needle)
