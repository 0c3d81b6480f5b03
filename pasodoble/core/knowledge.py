"""The knowledge base: deterministic, resumable passage sampling from large corpora (docs/METHOD.md step 1).

What: `PassageSampler(cfg).sample(step)` returns the knowledge passage(s) of a training step. A corpus is a JSONL,
Parquet or plain-text file, a folder of them, or a Hugging Face dataset (`hf:org/name`, `hf:org/name:split`, or
`hf:<folder written by save_to_disk>`). Records become text through `text_field`: a field name, or a template
such as "{question} Answer: {answer}". Records shorter than `min_chars` are skipped (and counted).

Why: the paper samples MegaMath (millions of web pages). Loading that whole is out of the question, and every rank
must see the same passage at the same step without talking to the others.

How: opening a corpus builds a light index (byte offsets of JSONL lines / text blocks, row-group sizes of Parquet
files; Hugging Face datasets are memory-mapped already); a record is read only when drawn. The passage of step s is
a pure function of (seed, s): a `random.Random` seeded with both draws a record uniformly, then one of its chunks,
so sampling needs no state beyond the seed and `state_dict` only checks that a resumed run sees the same corpus.
Run the tests with `python -m pytest tests/core/test_knowledge.py`.

Plain-text files hold one record per block of lines separated by blank lines. Compressed files are not read.

Departures from the reference code: the reference drew whole documents and left-truncated long ones to the prompt
budget, which could cut off the instructions that follow the passage. Here a long record is split into
`ceil(n / chunk_tokens)` near-equal chunks (by the tokenizer's tokens when given, else by ~4 characters per token,
cutting at whitespace) and one chunk is drawn; records are still drawn uniformly, as in the reference, so chunks of
long records are individually rarer.
"""

from __future__ import annotations

import math
import random
import string
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pasodoble.errors import ConfigError, UserError
from pasodoble.jsonl import LineError, decode_line

CHARS_PER_TOKEN = 4  # chunk size estimate when no tokenizer is given
MAX_DRAWS = 64  # redraws per passage before giving up on a corpus of short or broken records
JSONL_SUFFIXES = (".jsonl", ".ndjson")
TEXT_SUFFIXES = (".txt", ".md")
PARQUET_SUFFIXES = (".parquet",)
SUFFIXES = JSONL_SUFFIXES + TEXT_SUFFIXES + PARQUET_SUFFIXES


@dataclass
class KnowledgeConfig:
    # JSONL / Parquet / .txt file, a folder of them, "hf:org/name[:split]", or (domain: code) "stdlib" or .py files
    path: str | None = None
    text_field: str = (
        "text"  # field holding the passage, or a template "{question} {answer}" over several fields
    )
    chunk_tokens: int = 1024  # longer records are split into chunks of at most this many tokens
    min_chars: int = 20  # records shorter than this (after stripping) are skipped and counted
    seed: int = 0  # with the step number, fixes every draw

    def validate(self) -> None:
        if (
            self.path not in (None, "stdlib")
            and not self.path.startswith("hf:")
            and not Path(self.path).exists()
        ):
            raise ConfigError(
                "knowledge.path",
                f"{self.path} does not exist; point it at a JSONL/Parquet/.txt file or folder, or hf:org/name",
            )
        if not self.text_field.strip():
            raise ConfigError(
                "knowledge.text_field", "is empty; give a field name or a template like '{text}'"
            )
        try:
            _template_fields(self.text_field)
        except ValueError as err:
            raise ConfigError(
                "knowledge.text_field", f"is not a valid template ({err}); write '{{field}}'"
            ) from err
        if self.chunk_tokens < 1:
            raise ConfigError("knowledge.chunk_tokens", f"must be >= 1, got {self.chunk_tokens}")
        if self.min_chars < 0:
            raise ConfigError("knowledge.min_chars", f"must be >= 0, got {self.min_chars}")


@dataclass(frozen=True)
class Passage:
    id: str  # "<source>:<record>#<chunk>", stable for a given corpus
    text: str  # the passage text put into the Proposer prompt


def _template_fields(text_field: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(text_field) if name is not None]


class _Renderer:
    """Turns a record (a dict) into text with `text_field`; None when a field is missing."""

    def __init__(self, text_field: str):
        self.text_field = text_field
        self.fields = _template_fields(text_field) if "{" in text_field else [text_field]
        self.is_template = "{" in text_field

    def __call__(self, record: object) -> str | None:
        if not isinstance(record, dict) or any(f not in record for f in self.fields):
            return None
        values = {f: "" if record[f] is None else str(record[f]) for f in self.fields}
        return self.text_field.format_map(values) if self.is_template else values[self.text_field]

    def check(self, record: object, where: str) -> None:
        """ConfigError naming the file and the fix when the first record does not fit `text_field`."""
        if not isinstance(record, dict):
            raise ConfigError(where, f"records must be JSON objects, got {type(record).__name__}")
        missing = [f for f in self.fields if f not in record]
        if missing:
            raise ConfigError(
                "knowledge.text_field",
                f"{where}: first record has no field {missing[0]!r} (fields: {', '.join(record)}); set "
                "knowledge.text_field to one of them or to a template like '{question} Answer: {answer}'",
            )


class _JsonlFile:
    """One record per non-empty line, read by byte offset."""

    def __init__(self, path: Path, name: str, render: _Renderer):
        self.path, self.name, self.render = path, name, render
        self.offsets = array("q")
        pos = 0
        with path.open("rb") as f:
            for line in f:
                if line.strip():
                    self.offsets.append(pos)
                pos += len(line)
        if self.offsets:
            render.check(self._first_record(), str(path))

    def __len__(self) -> int:
        return len(self.offsets)

    def _line(self, i: int) -> bytes:
        with self.path.open("rb") as f:
            f.seek(self.offsets[i])
            return f.readline()

    def _first_record(self) -> object:
        """The first readable record among the first MAX_DRAWS lines (bad lines are the sampler's to count)."""
        problems = []
        for i in range(min(len(self.offsets), MAX_DRAWS)):
            try:
                return decode_line(self._line(i))
            except LineError as err:
                problems.append(err.problem)
        raise ConfigError(
            str(self.path),
            f"is not JSON lines: none of its first {len(problems)} lines can be read (line 1: {problems[0]})",
        )

    def text(self, i: int) -> str | None:
        try:
            return self.render(decode_line(self._line(i)))
        except LineError:  # a broken line mid-file (bad bytes or JSON): counted by the sampler, not fatal
            return None


class _TextFile:
    """One record per block of lines separated by blank lines."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name
        self.starts, self.ends = array("q"), array("q")
        pos, in_block = 0, False
        with path.open("rb") as f:
            for line in f:
                blank = not line.strip()
                if not blank and not in_block:
                    self.starts.append(pos)
                elif blank and in_block:
                    self.ends.append(pos)
                in_block = not blank
                pos += len(line)
        if in_block:
            self.ends.append(pos)

    def __len__(self) -> int:
        return len(self.starts)

    def text(self, i: int) -> str | None:
        with self.path.open("rb") as f:
            f.seek(self.starts[i])
            return f.read(self.ends[i] - self.starts[i]).decode("utf-8", errors="replace")


class _ParquetFile:
    """Rows of a Parquet file, read one row group at a time (the last one read is kept)."""

    def __init__(self, path: Path, name: str, render: _Renderer):
        import pyarrow.parquet as pq

        self.name, self.render = name, render
        try:
            self.file = pq.ParquetFile(path)
        except Exception as err:  # pyarrow raises several types for a non-Parquet file
            raise ConfigError(str(path), f"is not a readable Parquet file ({err}); re-export it") from err
        columns = set(self.file.schema_arrow.names)
        self.columns = [f for f in render.fields if f in columns]
        if len(self.columns) < len(render.fields) and self.file.metadata.num_rows:
            render.check(dict.fromkeys(columns), str(path))
        self.bounds = [0]
        for g in range(self.file.num_row_groups):
            self.bounds.append(self.bounds[-1] + self.file.metadata.row_group(g).num_rows)
        self._cached: tuple[int, list[dict]] | None = None

    def __len__(self) -> int:
        return self.bounds[-1]

    def text(self, i: int) -> str | None:
        group = bisect_right(self.bounds, i) - 1
        if self._cached is None or self._cached[0] != group:
            rows = self.file.read_row_group(group, columns=self.columns).to_pylist()
            self._cached = (group, rows)
        return self.render(self._cached[1][i - self.bounds[group]])


class _HFDataset:
    """A Hugging Face dataset (memory-mapped Arrow), by hub id or a `save_to_disk` folder."""

    def __init__(self, spec: str, render: _Renderer):
        import datasets

        self.name, self.render = spec, render
        local = Path(spec)
        try:
            if local.is_dir():
                data = datasets.load_from_disk(str(local))
                split = "train"
            else:
                repo, _, split = spec.partition(":")
                data = datasets.load_dataset(repo, split=split or "train")
        except Exception as err:  # network, missing repo, bad folder: all one user-facing failure
            raise ConfigError("knowledge.path", f"cannot load Hugging Face dataset {spec!r}: {err}") from err
        if isinstance(data, datasets.DatasetDict):
            if split not in data:
                raise ConfigError("knowledge.path", f"hf:{spec} has no split {split!r}; splits: {list(data)}")
            data = data[split]
        self.data = data
        if len(data):
            render.check(dict.fromkeys(data.column_names), f"hf:{spec}")

    def __len__(self) -> int:
        return len(self.data)

    def text(self, i: int) -> str | None:
        return self.render(self.data[i])


class _InMemory:
    """Passages given directly (tests, the tiny world)."""

    def __init__(self, passages: Sequence[Passage]):
        self.name = "memory"
        self.passages = list(passages)

    def __len__(self) -> int:
        return len(self.passages)

    def text(self, i: int) -> str | None:
        return self.passages[i].text


def _open_file(path: Path, name: str, render: _Renderer):
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return _JsonlFile(path, name, render)
    if suffix in TEXT_SUFFIXES:
        return _TextFile(path, name)
    if suffix in PARQUET_SUFFIXES:
        return _ParquetFile(path, name, render)
    raise ConfigError(str(path), f"unsupported file type {suffix!r}; use one of {', '.join(SUFFIXES)}")


def open_sources(cfg: KnowledgeConfig) -> list:
    """The corpus's sources in a fixed order (files of a folder sorted by relative path)."""
    render = _Renderer(cfg.text_field)
    if cfg.path is None:
        raise ConfigError("knowledge.path", "no corpus given; set it to a file, a folder or hf:org/name")
    if cfg.path.startswith("hf:"):
        return [_HFDataset(cfg.path[3:], render)]
    return [_open_file(path, name, render) for path, name in corpus_files(cfg.path)]


def corpus_files(path: str) -> list[tuple[Path, str]]:
    """(file, source name) of a corpus file or folder, in the fixed order sampling uses (sorted relative paths)."""
    root = Path(path)
    if not root.exists():
        raise ConfigError("knowledge.path", f"{root} does not exist; point it at a corpus file or folder")
    if root.is_file():
        return [(root, root.name)]
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise ConfigError("knowledge.path", f"{root} holds no {'/'.join(SUFFIXES)} files")
    return [(p, str(p.relative_to(root))) for p in files]


def _cut_at_space(text: str, pos: int, window: int = 64) -> int:
    end = min(len(text), pos + window)
    for j in range(pos, end):
        if text[j].isspace():
            return j
    return pos


def _token_cuts(text: str, chunk_tokens: int, tokenizer) -> list[str]:
    if not getattr(tokenizer, "is_fast", False):  # no offset mapping: cut the ids and decode each piece
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        pieces = math.ceil(len(ids) / chunk_tokens)
        cuts = [round(j * len(ids) / pieces) for j in range(pieces + 1)]
        return [tokenizer.decode(ids[a:b]) for a, b in zip(cuts, cuts[1:])]
    spans = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    n = len(spans)
    pieces = math.ceil(n / chunk_tokens)
    cuts = [0] + [spans[round(j * n / pieces)][0] for j in range(1, pieces)] + [len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


def _char_cuts(text: str, chunk_tokens: int) -> list[str]:
    pieces = math.ceil(len(text) / (chunk_tokens * CHARS_PER_TOKEN))
    cuts = [0] + [_cut_at_space(text, round(j * len(text) / pieces)) for j in range(1, pieces)] + [len(text)]
    return [text[a:b] for a, b in zip(cuts, cuts[1:])]


def chunk_text(text: str, chunk_tokens: int, tokenizer=None) -> list[str]:
    """Split `text` into ceil(n / chunk_tokens) near-equal chunks of n tokens (or ~4 characters per token).

    Text that fits is returned whole; with a fast tokenizer chunks are exact slices of `text`. Lone surrogates
    (which no file reader lets through, but a caller's string may hold) become U+FFFD: tokenizers cannot encode them.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if tokenizer is not None:
        fits = len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= chunk_tokens
        chunks = [text] if fits else _token_cuts(text, chunk_tokens, tokenizer)
    else:
        fits = len(text) <= chunk_tokens * CHARS_PER_TOKEN
        chunks = [text] if fits else _char_cuts(text, chunk_tokens)
    return [c.strip() for c in chunks if c.strip()]


class PassageSampler:
    """Draws the passage(s) of each step as a pure function of (seed, step)."""

    def __init__(self, cfg: KnowledgeConfig, tokenizer=None, passages: Sequence[Passage] | None = None):
        cfg.validate()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.sources = [_InMemory(passages)] if passages is not None else open_sources(cfg)
        self._bounds = [0]
        for source in self.sources:
            self._bounds.append(self._bounds[-1] + len(source))
        if self._bounds[-1] == 0:
            raise ConfigError("knowledge.path", f"{cfg.path or 'the passage list'} holds no records")
        self.skipped_short = 0  # draws rejected for being shorter than min_chars
        self.bad_records = 0  # draws rejected for broken JSON or missing fields

    def __len__(self) -> int:
        """Number of records (before chunking)."""
        return self._bounds[-1]

    def _record(self, index: int) -> tuple[str, int, str | None]:
        s = bisect_right(self._bounds, index) - 1
        local = index - self._bounds[s]
        return self.sources[s].name, local, self.sources[s].text(local)

    def _draw(self, rng: random.Random) -> Passage:
        for _ in range(MAX_DRAWS):
            name, local, text = self._record(rng.randrange(len(self)))
            if text is None:
                self.bad_records += 1
                continue
            if len(text.strip()) < self.cfg.min_chars:
                self.skipped_short += 1
                continue
            chunks = chunk_text(text.strip(), self.cfg.chunk_tokens, self.tokenizer)
            c = rng.randrange(len(chunks))
            return Passage(id=f"{name}:{local}#{c}", text=chunks[c])
        raise UserError(
            f"knowledge.path: {MAX_DRAWS} draws from {self.cfg.path or 'the passage list'} found no record with "
            f"at least {self.cfg.min_chars} characters ({self.bad_records} broken); check knowledge.text_field "
            "and knowledge.min_chars"
        )

    def sample(self, step: int, k: int = 1) -> list[Passage]:
        """The k passages of `step` (drawn independently); the same on every rank and after a resume."""
        rng = random.Random(f"pasodoble.knowledge:{self.cfg.seed}:{step}")
        return [self._draw(rng) for _ in range(k)]

    def state_dict(self) -> dict:
        return {
            "seed": self.cfg.seed,
            "num_records": len(self),
            "skipped_short": self.skipped_short,
            "bad_records": self.bad_records,
        }

    def load_state_dict(self, state: dict) -> None:
        if int(state["num_records"]) != len(self):
            raise ConfigError(
                "knowledge.path",
                f"the corpus has {len(self)} records but the checkpoint was made with {state['num_records']}; "
                "resume with the same corpus",
            )
        self.cfg.seed = int(state["seed"])
        self.skipped_short = int(state["skipped_short"])
        self.bad_records = int(state["bad_records"])
