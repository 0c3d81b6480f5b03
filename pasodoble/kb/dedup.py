"""Exact and near-duplicate removal for corpora (`pasodoble kb dedup CORPUS --out FILE`).

What: `dedup_corpus` streams a corpus once and writes the records that survive the length filter and are neither an
exact duplicate (same text after lower-casing and collapsing white space) nor a near duplicate (Jaccard
similarity of word 5-gram shingles at or above `threshold`) of a record kept before them. The first record of each
group wins, so the result is deterministic.

Why: web corpora repeat pages (mirrors, boilerplate, templated exercises); a Proposer drawing the same passage
again and again learns to repeat questions, which the diversity reward then punishes.

How: MinHash (Broder 1997) with `num_perm` universal hashes over 32-bit shingle hashes (numpy, per record); LSH
splits each signature into b bands of r rows, and a record sharing a band with kept records is a candidate (a pair
of similarity s is one with probability 1 - (1 - s^r)^b; r is the largest that misses a pair at `threshold` at
most `MAX_MISS` of the time). It is dropped only when its true
shingle Jaccard with one of them (those sharing the most bands first, at most `MAX_CANDIDATES`) reaches
`threshold`: shingles are compared as 64-bit hashes, exact up to a hash collision. Memory: one key per band per
kept record (a key remembers at most `MAX_PER_BAND` records), one per distinct text, and 8 bytes per distinct
shingle of the kept records. Records shorter than one shingle are compared as one shingle of all their words.
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

from pasodoble.core.knowledge import KnowledgeConfig
from pasodoble.errors import ConfigError
from pasodoble.kb.stream import LengthFilter, filtered

MAX_NUM_PERM = 4096  # past this, signatures cost memory and time for no better estimate
MAX_MISS = 0.01  # the chance that a pair at the threshold is never a candidate
MAX_PER_BAND = 32  # kept records remembered per band key (near-identical corpora share bands widely)
MAX_CANDIDATES = 32  # band candidates verified per record, those sharing the most bands first
PRIME = 4_294_967_291  # largest prime below 2**32: (a x + b) stays below 2**64 for 32-bit x, a, b
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_SPACE_RE = re.compile(r"\s+")


@dataclass
class DedupConfig:
    exact: bool = True  # drop records whose normalised text was kept before
    near: bool = True  # drop records at or above `threshold` Jaccard with a kept record (MinHash candidates)
    threshold: float = 0.8  # word-shingle Jaccard similarity from which a pair is a near duplicate
    num_perm: int = 128  # MinHash permutations (signature length)
    shingle_words: int = 5  # words per shingle
    seed: int = 1  # seeds the hash functions

    def validate(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError("--threshold", f"must be in (0, 1), got {self.threshold}")
        if not 2 <= self.num_perm <= MAX_NUM_PERM:
            raise ConfigError("--num-perm", f"must be in [2, {MAX_NUM_PERM}], got {self.num_perm}")
        if self.shingle_words < 1:
            raise ConfigError("--shingle-words", f"must be at least 1, got {self.shingle_words}")

    def bands_rows(self) -> tuple[int, int]:
        """(bands, rows) with bands * rows <= num_perm and the most rows per band for which a pair at `threshold`
        shares no band with probability at most `MAX_MISS`: candidates are verified, so recall comes first."""
        for rows in range(self.num_perm, 0, -1):
            bands = self.num_perm // rows
            if (1.0 - self.threshold**rows) ** bands <= MAX_MISS:
                return bands, rows
        return self.num_perm, 1


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


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted arrays of distinct shingle hashes."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


class Deduplicator:
    """Decides record by record whether a text repeats one kept before (exact or near)."""

    def __init__(self, cfg: DedupConfig):
        cfg.validate()
        self.cfg = cfg
        self.bands, self.rows = cfg.bands_rows()
        self.hasher = MinHasher(cfg.num_perm, cfg.seed)
        self.exact_keys: set[int] = set()
        self.band_records: dict[int, list[int]] = {}  # band key -> kept records with that band
        self.kept_shingles: list[np.ndarray] = []  # per kept record: sorted distinct shingle hashes
        self.below_threshold = 0  # band candidates whose true Jaccard fell short (kept)

    def _near(self, keys: list[int], hashes: np.ndarray) -> bool:
        votes = Counter(i for k in keys for i in self.band_records.get(k, ()))
        found = any(
            jaccard(hashes, self.kept_shingles[i]) >= self.cfg.threshold
            for i, _ in votes.most_common(MAX_CANDIDATES)
        )
        self.below_threshold += bool(votes) and not found
        return found

    def check(self, text: str) -> str | None:
        """None if `text` is new (and remember it); else "exact_duplicate" / "near_duplicate"."""
        exact_key = _key(normalise(text).encode())
        if self.cfg.exact and exact_key in self.exact_keys:
            return "exact_duplicate"
        keys: list[int] = []
        if self.cfg.near:
            items = shingles(text, self.cfg.shingle_words)
            sig = self.hasher.signature(items)
            for band in range(self.bands):
                rows = sig[band * self.rows : (band + 1) * self.rows]
                keys.append(_key(band.to_bytes(2, "little") + rows.tobytes()))
            hashes = np.unique(
                np.fromiter((_key(s.encode()) for s in items), dtype=np.uint64, count=len(items))
            )
            if self._near(keys, hashes):
                return "near_duplicate"
            record = len(self.kept_shingles)
            self.kept_shingles.append(hashes)
            for k in keys:
                ids = self.band_records.setdefault(k, [])
                if len(ids) < MAX_PER_BAND:
                    ids.append(record)
        self.exact_keys.add(exact_key)
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
    return {
        "out": str(out),
        "bands": deduper.bands,
        "rows_per_band": deduper.rows,
        **counts,
        "near_below_threshold": deduper.below_threshold,
    }
