"""Diversity of proposed questions against a history of recent ones (docs/METHOD.md step 6).

What: a FIFO history of the last `maxlen` (H = 100) questions, each kept as its set of token ids. A new question's
diversity d is the fraction of history items whose Jaccard similarity to it is <= `similarity_threshold` (0.8);
d = 1 when the history is empty.

Why: the Proposer earns nothing for repeating itself (reward 0 when d <= 0.3), which keeps it from collapsing onto
one easy-to-reward question.

How to run: pure state object; `python -m pytest tests/core/test_diversity.py`. Use it in two calls per step:
`scores(questions)` against the history as it was before the step, then `extend(questions)`.

Semantics, as the reference code has them: a step's own questions are scored only against earlier steps, never
against each other (the reference buffers them while scoring and appends them afterwards), so six copies of one new
question all get d = 1 in their first step. Two empty token sets have similarity 1. Tokens are the question text's
ids without special tokens.

Departures from the reference code: the reference appended to the history on rank 0 only, so ranks disagreed about
d; here the history is plain, JSON-serialisable state that every rank updates identically and checkpoints restore.
The reference appended a step's questions (including invalid, empty ones) only on steps where some question cleared
the pass-rate gate; which questions to `extend` with is the caller's choice (valid ones, every step, is the sane one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


def token_set(token_ids: Sequence[int]) -> frozenset[int]:
    """The set of distinct token ids of a question."""
    return frozenset(int(t) for t in token_ids)


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """|a & b| / |a | b|; two empty sets count as identical (1.0), as in the reference."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class QuestionHistory:
    """The last `maxlen` questions as token sets, with diversity scores against them."""

    def __init__(self, maxlen: int = 100, similarity_threshold: float = 0.8):
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        if not 0.0 <= similarity_threshold <= 1.0:
            raise ValueError(f"similarity_threshold must be in [0, 1], got {similarity_threshold}")
        self.maxlen = maxlen
        self.similarity_threshold = similarity_threshold
        self._sets: deque[frozenset[int]] = deque(maxlen=maxlen)

    def __len__(self) -> int:
        return len(self._sets)

    def _is_similar(self, a: frozenset[int], b: frozenset[int]) -> bool:
        # Jaccard <= min/max of the sizes: a cheap bound that skips most set intersections.
        small, large = sorted((len(a), len(b)))
        if large and small / large <= self.similarity_threshold:
            return False
        return jaccard(a, b) > self.similarity_threshold

    def score(self, question: Sequence[int]) -> float:
        """d for one question: the fraction of history items it is not similar to (1.0 if the history is empty)."""
        if not self._sets:
            return 1.0
        new = token_set(question)
        similar = sum(self._is_similar(new, old) for old in self._sets)
        return (len(self._sets) - similar) / len(self._sets)

    def scores(self, questions: Sequence[Sequence[int]]) -> list[float]:
        """d_i for each question against the current history; the questions are not compared to each other."""
        return [self.score(q) for q in questions]

    def extend(self, questions: Sequence[Sequence[int]]) -> None:
        """Append questions in order; the oldest fall out past `maxlen`."""
        self._sets.extend(token_set(q) for q in questions)

    def state_dict(self) -> dict:
        return {
            "maxlen": self.maxlen,
            "similarity_threshold": self.similarity_threshold,
            "questions": [sorted(s) for s in self._sets],
        }

    def load_state_dict(self, state: dict) -> None:
        self.maxlen = int(state["maxlen"])
        self.similarity_threshold = float(state["similarity_threshold"])
        self._sets = deque((frozenset(q) for q in state["questions"]), maxlen=self.maxlen)
