"""Knowledge-base tools: look at a corpus before training on it (`pasodoble kb stats | dedup | sample`).

`stream.py` reads a corpus sequentially (records, skip reasons, length filters, `kb stats`); `dedup.py` removes exact
and near duplicates with MinHash (`kb dedup`); `cli.py` wires the commands and the preview (`kb sample`), which draws
passages exactly as training does (`PassageSampler`, the same seed gives the same passages).
"""

from pasodoble.kb.dedup import DedupConfig, Deduplicator, dedup_corpus
from pasodoble.kb.stream import LengthFilter, Record, corpus_stats, iter_records

__all__ = [
    "DedupConfig",
    "Deduplicator",
    "LengthFilter",
    "Record",
    "corpus_stats",
    "dedup_corpus",
    "iter_records",
]
