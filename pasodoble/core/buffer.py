"""The offline mode's question buffer (docs/METHOD.md, offline mode).

What: an ordered store of (question, answer, pass rate, step) items. The Proposer-only phase adds every valid
question with a learnable pass rate; the Solver-only phase `take`s the next k in order.

Why: offline training alternates roles, so the Solver trains on questions proposed earlier; a buffer with a cursor
makes that order explicit, bounded if wanted, and resumable from a checkpoint.

How to run: plain state object; `python -m pytest tests/core/test_buffer.py`.

Departures from the reference code:
- The reference never evicts; `max_size` with `eviction="fifo"` bounds memory (the default, no bound, is faithful).
  With a bound and `eviction="none"`, new items beyond it are dropped and counted in `dropped`.
- The reference cycles back to the start when the cursor reaches the end, so old questions are served again
  (and repeats a question within one batch when the buffer is smaller than the batch). Here `wrap=True` cycles
  without repeating within one `take`; the default `wrap=False` serves each question once, so a Solver phase ends
  when the buffer is used up instead of retraining stale questions.
- The reference's pass-rate bookkeeping after training (removal after 3 stale visits) is not carried over: a
  question is served once (or cyclically with `wrap`) and its stored pass rate is the one it entered with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

EVICTIONS = ("none", "fifo")


@dataclass(frozen=True)
class BufferItem:
    question: str  # the Proposer's question text
    answer: str  # the Proposer's answer (the label)
    pass_rate: float  # the Solver's pass rate when the question was proposed
    step: int  # the training step that proposed it


class QuestionBuffer:
    """Ordered question store with a read cursor; optional size bound with FIFO eviction."""

    def __init__(self, max_size: int | None = None, eviction: str = "none", *, wrap: bool = False):
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be >= 1 or None, got {max_size}")
        if eviction not in EVICTIONS:
            raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
        self.max_size = max_size
        self.eviction = eviction
        self.wrap = wrap
        self._items: list[BufferItem] = []
        self._cursor = 0  # index of the next item `take` returns
        self.dropped = 0  # items refused (bound reached, eviction "none") or evicted (fifo)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def unread(self) -> int:
        """Items not yet served since the cursor last passed them."""
        return len(self._items) - self._cursor

    def add(self, items: Iterable[BufferItem]) -> None:
        for item in items:
            if self.max_size is not None and len(self._items) >= self.max_size:
                self.dropped += 1
                if self.eviction == "none":
                    continue
                self._items.pop(0)
                self._cursor = max(0, self._cursor - 1)
            self._items.append(item)

    def take(self, k: int) -> list[BufferItem]:
        """The next k items in order; fewer at the end unless `wrap`, and never the same item twice in one call."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if self.wrap and self._items:
            if self._cursor >= len(self._items):
                self._cursor = 0
            k = min(k, len(self._items))
            order = self._items[self._cursor :] + self._items[: self._cursor]
            self._cursor = (self._cursor + k) % len(self._items)
            return order[:k]
        out = self._items[self._cursor : self._cursor + k]
        self._cursor += len(out)
        return out

    def state_dict(self) -> dict:
        return {
            "max_size": self.max_size,
            "eviction": self.eviction,
            "wrap": self.wrap,
            "cursor": self._cursor,
            "dropped": self.dropped,
            "items": [asdict(item) for item in self._items],
        }

    def load_state_dict(self, state: dict) -> None:
        self.max_size = state["max_size"]
        self.eviction = state["eviction"]
        self.wrap = bool(state["wrap"])
        self._cursor = int(state["cursor"])
        self.dropped = int(state["dropped"])
        self._items = [BufferItem(**item) for item in state["items"]]
