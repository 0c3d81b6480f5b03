"""The QA checker: exact match and token F1 of a predicted answer against a gold answer and its aliases.

What: `exact_match` and `token_f1` compare two strings after one normalisation rule (`normalize.py`); `check`
takes the best over {answer, aliases} and decides correctness by exact match, or by F1 >= `f1_threshold` when one
is given. `extract_answer` reads the short answer out of a Solver's reply.

Why: a substring reward is hacked by answering with an empty string or with a list of candidates (Visual-RFT
issue 176), so nothing here gives substring credit: an empty prediction is never correct (not even against a
gold that normalises to nothing), a stuffed answer ("Paris, London or Rome") and a longer span that merely
contains the gold ("in Paris, France") are not exact matches, and their F1 is below 1 (precision drops).

Departure from SQuAD v1.1's script: there, a prediction and a gold that both normalise to nothing score EM 1;
here they score 0 (a gold that normalises to nothing cannot be checked). Token F1 is otherwise SQuAD's.

How to run: pure functions; `python -m pytest tests/qa/test_check.py`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pasodoble.qa.normalize import normalize


def exact_match(prediction: str, gold: str, rule: str = "canonical") -> bool:
    """Equal after normalisation, and not empty."""
    normal = normalize(prediction, rule)
    return bool(normal) and normal == normalize(gold, rule)


def token_f1(prediction: str, gold: str, rule: str = "canonical") -> float:
    """SQuAD's token F1: harmonic mean of precision and recall of the shared normalised tokens (a multiset)."""
    predicted, wanted = normalize(prediction, rule).split(), normalize(gold, rule).split()
    shared = sum((Counter(predicted) & Counter(wanted)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(wanted)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class Check:
    correct: bool  # exact match with some gold; with an F1 threshold: F1 >= threshold with some gold
    em: float  # 1.0 or 0.0: the best exact match over the golds
    f1: float  # the best token F1 over the golds
    matched: str | None  # the gold that gave the best F1 (None when all F1 are 0)


def check(
    prediction: str | None,
    golds: Sequence[str],
    *,
    rule: str = "canonical",
    f1_threshold: float | None = None,
) -> Check:
    """Best exact match and F1 of `prediction` over `golds` (the answer and its aliases)."""
    if prediction is None or not golds:
        return Check(False, 0.0, 0.0, None)
    em = max(exact_match(prediction, gold, rule) for gold in golds)
    scores = [(token_f1(prediction, gold, rule), gold) for gold in golds]
    f1, matched = max(scores, key=lambda pair: pair[0])
    correct = em if f1_threshold is None else f1 >= f1_threshold
    return Check(bool(correct), float(em), f1, matched if f1 > 0 else None)


GOLD_SEPARATOR = (
    "\n"  # between the answer and its aliases in one gold string (the `qa` domain's Proposal.answer)
)


def join_golds(golds: Sequence[str]) -> str:
    """One gold string for the answer and its aliases; whitespace inside each collapses (normalisation does too)."""
    return GOLD_SEPARATOR.join(" ".join(g.split()) for g in golds)


def split_golds(gold: str) -> list[str]:
    """The answer and its aliases of a `join_golds` string (a plain answer is a list of one)."""
    return gold.split(GOLD_SEPARATOR)


_THINK_END = "</think>"
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_MARK = re.compile(r"(?:final answer|answer)\s*(?:is)?\s*[:：]", re.IGNORECASE)


def extract_answer(text: str) -> str | None:
    """The short answer of a Solver reply; None when there is none.

    In order: the last `<answer>...</answer>`; else the rest of the line after the last "Answer:" (or "Final
    answer:"); else the first non-empty line. A thinking block is skipped; one left open means no answer.
    """
    close = text.rfind(_THINK_END)
    if close >= 0:
        text = text[close + len(_THINK_END) :]
    elif "<think>" in text:
        return None
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        found = tagged[-1]
    else:
        marks = list(_ANSWER_MARK.finditer(text))
        tail = text[marks[-1].end() :] if marks else text
        found = next((line for line in tail.splitlines() if line.strip()), "")
    found = found.strip()
    return found or None
