"""A direct rank-merging BPE encoder (how tiktoken encodes one pre-tokenized piece), the reference the tokenizer
conversion is checked against."""

from __future__ import annotations


def rank_encode(word: bytes, rank: dict[bytes, int]) -> list[int]:
    """Reference encoder: repeatedly merge the adjacent pair whose result has the lowest rank."""
    parts = [bytes([b]) for b in word]
    while True:
        pairs = [(rank[a + b], i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if a + b in rank]
        if not pairs:
            return [rank[p] for p in parts]
        _, i = min(pairs)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
