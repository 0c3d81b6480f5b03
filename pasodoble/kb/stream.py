"""Stream a corpus record by record, filter by length, and summarise it (`pasodoble kb stats`).

What: `iter_records(cfg)` yields every record of a corpus (the formats `knowledge.py` reads) in the order sampling
indexes them, with its text or the reason it has none; `LengthFilter` adds length reasons; `corpus_stats` counts
records, chunks, token lengths and skips, and the bytes read per second.

Why: before a long run a user wants to know what the Proposer will be shown: how many records survive, how long
they are, how many chunks the long ones become, and what was dropped. `PassageSampler` indexes a corpus for random
access; a summary only needs one sequential pass, which is much faster and holds nothing but counters.

How: files are read line by line (JSONL), block by block (text) or row group by row group (Parquet); memory stays
flat whatever the corpus size (length percentiles are exact, from a counter of distinct lengths). Token lengths come
from `--tokenizer` when given, else the estimate chunking uses (~4 characters per token), and chunk lengths follow
`knowledge.chunk_text`'s split into ceil(n / chunk_tokens) near-equal pieces.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from pasodoble.core.knowledge import (
    CHARS_PER_TOKEN,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    TEXT_SUFFIXES,
    KnowledgeConfig,
    _Renderer,
    corpus_files,
)
from pasodoble.errors import ConfigError

SKIP_REASONS = ("bad_json", "not_object", "missing_field", "too_short", "too_long")
PERCENTILES = (0, 10, 50, 90, 99, 100)


@dataclass
class Record:
    source: str  # file name relative to the corpus root (or the dataset spec)
    index: int  # record number within its source, as `PassageSampler` counts it
    text: str | None  # the rendered, stripped passage text (None when skipped)
    row: dict | None  # the record as read (None for broken JSON)
    reason: str | None  # None when kept; else one of SKIP_REASONS
    nbytes: int  # bytes this record took in its file (0 for datasets)


@dataclass
class LengthFilter:
    min_chars: int = 20  # records shorter than this (after stripping) are skipped: too_short
    max_chars: int | None = None  # records longer than this are skipped: too_long (None: no limit)
    min_tokens: int | None = None  # fewer tokens than this: too_short (None: no limit)
    max_tokens: int | None = None  # more tokens than this: too_long (None: no limit)

    def validate(self) -> None:
        for name in ("min_chars", "max_chars", "min_tokens", "max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"--{name.replace('_', '-')}", f"must be >= 0, got {value}")
        if self.max_chars is not None and self.max_chars < self.min_chars:
            raise ConfigError("--max-chars", "must be at least --min-chars")
        if None not in (self.min_tokens, self.max_tokens) and self.max_tokens < self.min_tokens:
            raise ConfigError("--max-tokens", "must be at least --min-tokens")

    def reason(self, text: str, tokens: int | None) -> str | None:
        """None if `text` passes; else "too_short" / "too_long"."""
        if len(text) < self.min_chars or (self.min_tokens is not None and tokens < self.min_tokens):
            return "too_short"
        if self.max_chars is not None and len(text) > self.max_chars:
            return "too_long"
        if self.max_tokens is not None and tokens > self.max_tokens:
            return "too_long"
        return None


def count_tokens(text: str, tokenizer=None) -> int:
    """Tokens of `text` by `tokenizer`, else the chunker's estimate (ceil of characters / 4)."""
    if tokenizer is None:
        return math.ceil(len(text) / CHARS_PER_TOKEN)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def chunk_lengths(tokens: int, chunk_tokens: int) -> list[int]:
    """Token lengths of the chunks `knowledge.chunk_text` cuts a record of `tokens` tokens into."""
    if tokens <= chunk_tokens:
        return [tokens]
    pieces = math.ceil(tokens / chunk_tokens)
    cuts = [round(j * tokens / pieces) for j in range(pieces + 1)]
    return [b - a for a, b in zip(cuts, cuts[1:])]


def _render(render: _Renderer, row: object) -> tuple[str | None, str | None]:
    if not isinstance(row, dict):
        return None, "not_object"
    text = render(row)
    return (None, "missing_field") if text is None else (text.strip(), None)


def _jsonl(path: Path, name: str, render: _Renderer) -> Iterator[Record]:
    index = 0
    with path.open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                yield Record(name, index, None, None, "bad_json", len(line))
            else:
                text, reason = _render(render, row)
                yield Record(name, index, text, row if isinstance(row, dict) else None, reason, len(line))
            index += 1


def _text_blocks(path: Path, name: str) -> Iterator[Record]:
    block: list[bytes] = []
    index = 0
    with path.open("rb") as f:
        for line in itertools.chain(f, [b""]):  # the trailing b"" closes the last block
            if line.strip():
                block.append(line)
                continue
            if block:
                raw = b"".join(block)
                text = raw.decode("utf-8", errors="replace").strip()
                yield Record(name, index, text, {"text": text}, None, len(raw) + len(line))
                index, block = index + 1, []


def _parquet(path: Path, name: str, render: _Renderer) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a non-Parquet file
        raise ConfigError(str(path), f"is not a readable Parquet file ({err}); re-export it") from err
    share = path.stat().st_size / max(1, file.metadata.num_rows)
    index = 0
    for group in range(file.num_row_groups):
        for row in file.read_row_group(group).to_pylist():
            text, reason = _render(render, row)
            yield Record(name, index, text, row, reason, round(share))
            index += 1


def _hf(spec: str, render: _Renderer) -> Iterator[Record]:
    from pasodoble.core.knowledge import _HFDataset

    data = _HFDataset(spec, render).data
    for index, row in enumerate(data):
        text, reason = _render(render, row)
        yield Record(f"hf:{spec}", index, text, row, reason, 0)


def corpus_bytes(cfg: KnowledgeConfig) -> int | None:
    """Total size of the corpus files (None for a Hugging Face dataset): the progress bar's length."""
    if cfg.path is None or cfg.path.startswith("hf:"):
        return None
    return sum(path.stat().st_size for path, _ in corpus_files(cfg.path))


def iter_records(cfg: KnowledgeConfig) -> Iterator[Record]:
    """Every record of the corpus in sampling order, with its text or the reason it has none (see Record)."""
    if cfg.path is None:
        raise ConfigError("CORPUS", "no corpus given; pass a file, a folder or hf:org/name")
    render = _Renderer(cfg.text_field)
    if cfg.path.startswith("hf:"):
        yield from _hf(cfg.path[3:], render)
        return
    for path, name in corpus_files(cfg.path):
        suffix = path.suffix.lower()
        if suffix in JSONL_SUFFIXES:
            yield from _jsonl(path, name, render)
        elif suffix in TEXT_SUFFIXES:
            yield from _text_blocks(path, name)
        elif suffix in PARQUET_SUFFIXES:
            yield from _parquet(path, name, render)
        else:
            raise ConfigError(str(path), f"unsupported file type {suffix!r}")


def filtered(
    cfg: KnowledgeConfig, filt: LengthFilter, tokenizer=None, *, progress: bool = True
) -> Iterator[tuple[Record, int | None]]:
    """(record, token count or None) for every record, with length reasons applied; a bytes progress bar."""
    filt.validate()
    bar = tqdm(
        total=corpus_bytes(cfg), unit="B", unit_scale=True, desc="corpus", disable=not progress, leave=False
    )
    try:
        for record in iter_records(cfg):
            bar.update(record.nbytes)
            tokens = None
            if record.reason is None:
                tokens = count_tokens(record.text, tokenizer)
                record.reason = filt.reason(record.text, tokens)
            yield record, tokens
    finally:
        bar.close()


def percentiles(counts: Counter, qs=PERCENTILES) -> dict[str, int]:
    """Exact nearest-rank percentiles of a {value: count} counter ({} when empty)."""
    total = sum(counts.values())
    if not total:
        return {}
    out, seen, values = {}, 0, sorted(counts)
    ranks = {q: max(1, math.ceil(q / 100 * total)) for q in qs}
    pending = sorted(qs, key=lambda q: ranks[q])
    for value in values:
        seen += counts[value]
        while pending and ranks[pending[0]] <= seen:
            out[f"p{pending.pop(0)}"] = value
    return {f"p{q}": out[f"p{q}"] for q in qs}


def corpus_stats(cfg: KnowledgeConfig, filt: LengthFilter, tokenizer=None, *, progress: bool = True) -> dict:
    """One pass over the corpus: counts, skip reasons, length percentiles, chunks, throughput (see module doc)."""
    start = time.perf_counter()
    records, nbytes, chunks = 0, 0, 0
    skipped: Counter = Counter()
    record_tokens: Counter = Counter()
    chunk_tokens: Counter = Counter()
    for record, tokens in filtered(cfg, filt, tokenizer, progress=progress):
        records += 1
        nbytes += record.nbytes
        if record.reason is not None:
            skipped[record.reason] += 1
            continue
        record_tokens[tokens] += 1
        for n in chunk_lengths(tokens, cfg.chunk_tokens):
            chunk_tokens[n] += 1
            chunks += 1
    seconds = time.perf_counter() - start
    return {
        "corpus": cfg.path,
        "records": records,
        "kept": records - sum(skipped.values()),
        "skipped": {reason: skipped[reason] for reason in SKIP_REASONS if skipped[reason]},
        "chunks": chunks,
        "chunk_tokens": cfg.chunk_tokens,
        "tokens": "tokenizer" if tokenizer is not None else f"estimated ({CHARS_PER_TOKEN} characters each)",
        "record_tokens": percentiles(record_tokens),
        "chunk_token_lengths": percentiles(chunk_tokens),
        "total_tokens": sum(n * c for n, c in record_tokens.items()),
        "bytes": nbytes,
        "seconds": round(seconds, 3),
        "mb_per_s": round(nbytes / 1e6 / seconds, 2) if seconds > 0 else None,
    }
