"""Exact and near-duplicate removal for corpora (`pasodoble kb dedup CORPUS --out FILE`).

What: `dedup_corpus` streams a corpus once and writes the records that survive the length filter and are neither an
exact duplicate (same text after lower-casing and collapsing white space) nor a near duplicate (estimated Jaccard
similarity of word 5-gram shingles above about `threshold`) of a record kept before them. The first record of each
group wins, so the result is deterministic.

Why: web corpora repeat pages (mirrors, boilerplate, templated exercises); a Proposer drawing the same passage
again and again learns to repeat questions, which the diversity reward then punishes.

How: MinHash (Broder 1997) with `num_perm` universal hashes h(x) = (a x + b) mod p over 32-bit shingle hashes,
computed with numpy per record; locality-sensitive hashing splits each signature into `bands` bands, and a record is
a near duplicate when one of its bands equals a band of a kept record. The index keeps one 64-bit key per band per
kept record (plus one per distinct text for the exact test): memory grows with the number of kept records, never
with their length, and nothing else is held. The band count follows from the threshold: with r rows per band the
S-curve 1 - (1 - s^r)^b crosses 1/2 near s = (1/b)^(1/r).

Departure from common pipelines (datasketch, text-dedup): candidate pairs are not re-checked against full
signatures, which would mean storing every signature; a band collision alone marks a duplicate. Records shorter
than one shingle are compared as one shingle of all their words.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pasodoble.errors import ConfigError
from pasodoble.kb.stream import LengthFilter, filtered
from pasodoble.knowledge import KnowledgeConfig

PRIME = 4_294_967_291  # largest prime below 2**32: (a x + b) stays below 2**64 for 32-bit x, a, b
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SPACE_RE = re.compile(r"\s+")


@dataclass
class DedupConfig:
    exact: bool = True  # drop records whose normalised text was kept before
    near: bool = True  # drop records whose MinHash bands collide with a kept record's
    threshold: float = 0.8  # Jaccard similarity around which a pair counts as near-duplicate
    num_perm: int = 128  # MinHash permutations (signature length)
    shingle_words: int = 5  # words per shingle
    seed: int = 1  # seeds the hash functions

    def validate(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError("--threshold", f"must be in (0, 1), got {self.threshold}")
        if self.num_perm < 2:
            raise ConfigError("--num-perm", f"must be at least 2, got {self.num_perm}")
        if self.shingle_words < 1:
            raise ConfigError("--shingle-words", f"must be at least 1, got {self.shingle_words}")

    def bands_rows(self) -> tuple[int, int]:
        """(bands, rows) with bands * rows <= num_perm whose S-curve midpoint is closest to `threshold`."""
        best = None
        for bands in range(1, self.num_perm + 1):
            rows = self.num_perm // bands
            midpoint = (1.0 / bands) ** (1.0 / rows)
            score = abs(midpoint - self.threshold)
            if best is None or score < best[0]:
                best = (score, bands, rows)
        return best[1], best[2]


def normalise(text: str) -> str:
    """Lower-cased text with white space collapsed: the exact-duplicate key."""
    return _SPACE_RE.sub(" ", text.lower()).strip()


def shingles(text: str, k: int) -> set[str]:
    """Word k-grams of the lower-cased text (one shingle of all words when there are fewer than k)."""
    words = _WORD_RE.findall(text.lower())
    if len(words) <= k:
        return {" ".join(words)}
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


class MinHasher:
    """Signatures of `num_perm` universal hashes over 32-bit shingle hashes (see module doc)."""

    def __init__(self, num_perm: int, seed: int):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, PRIME, size=num_perm, dtype=np.uint64)[:, None]  # (P, 1)
        self.b = rng.integers(0, PRIME, size=num_perm, dtype=np.uint64)[:, None]  # (P, 1)

    def signature(self, items: set[str]) -> np.ndarray:
        x = np.fromiter((zlib.crc32(s.encode()) for s in items), dtype=np.uint64, count=len(items))  # (S,)
        return ((self.a * x[None, :] + self.b) % PRIME).min(axis=1)  # (P,)


def _key(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class Deduplicator:
    """Decides record by record whether a text repeats one kept before (exact or near)."""

    def __init__(self, cfg: DedupConfig):
        cfg.validate()
        self.cfg = cfg
        self.bands, self.rows = cfg.bands_rows()
        self.hasher = MinHasher(cfg.num_perm, cfg.seed)
        self.exact_keys: set[int] = set()
        self.band_keys: set[int] = set()

    def check(self, text: str) -> str | None:
        """None if `text` is new (and remember it); else "exact_duplicate" / "near_duplicate"."""
        exact_key = _key(normalise(text).encode())
        if self.cfg.exact and exact_key in self.exact_keys:
            return "exact_duplicate"
        keys: list[int] = []
        if self.cfg.near:
            sig = self.hasher.signature(shingles(text, self.cfg.shingle_words))
            for band in range(self.bands):
                rows = sig[band * self.rows : (band + 1) * self.rows]
                keys.append(_key(band.to_bytes(2, "little") + rows.tobytes()))
            if any(k in self.band_keys for k in keys):
                return "near_duplicate"
        self.exact_keys.add(exact_key)
        self.band_keys.update(keys)
        return None


def dedup_corpus(
    cfg: KnowledgeConfig,
    filt: LengthFilter,
    dedup: DedupConfig,
    out: Path,
    *,
    tokenizer=None,
    progress: bool = True,
) -> dict:
    """Stream `cfg`'s corpus into `out` (JSONL, one kept record per line, written atomically); return the counts."""
    deduper = Deduplicator(dedup)
    counts: Counter = Counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for record, _ in filtered(cfg, filt, tokenizer, progress=progress):
                counts["records"] += 1
                reason = record.reason or deduper.check(record.text)
                if reason is not None:
                    counts[reason] += 1
                    continue
                counts["kept"] += 1
                row = record.row if record.row is not None else {"text": record.text}
                f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"out": str(out), "bands": deduper.bands, "rows_per_band": deduper.rows, **counts}
