"""Knowledge-base tools: streaming stats, length filters, exact and near-duplicate removal, the preview, the CLI."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from pasodoble.cli import main
from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler, chunk_text
from pasodoble.errors import ConfigError
from pasodoble.io import read_jsonl
from pasodoble.kb import DedupConfig, Deduplicator, LengthFilter, corpus_stats, dedup_corpus, iter_records
from pasodoble.kb.dedup import shingles
from pasodoble.kb.stream import chunk_lengths, percentiles

SHARED = Path(os.environ.get("PASODOBLE_DATA_DIR") or Path(__file__).resolve().parents[2] / ".." / "shared")
COLLEGE_MATH = SHARED / "corpora" / "college_math.jsonl"
needs_corpus = pytest.mark.skipif(
    not COLLEGE_MATH.exists(), reason=f"shared corpus not found at {COLLEGE_MATH}"
)


def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(5000)}" for _ in range(n))


def test_records_carry_skip_reasons_in_sampling_order(tmp_path):
    path = write_lines(
        tmp_path / "c.jsonl",
        [{"text": "a long enough passage of text"}, "{broken", [1, 2], {"other": "x"}, {"text": "short"}],
    )
    records = list(iter_records(KnowledgeConfig(path=str(path))))
    assert [r.index for r in records] == [0, 1, 2, 3, 4]  # the same numbering as PassageSampler's index
    assert [r.reason for r in records] == [None, "bad_json", "not_object", "missing_field", None]
    assert sum(r.nbytes for r in records) == path.stat().st_size
    stats = corpus_stats(KnowledgeConfig(path=str(path)), LengthFilter(min_chars=10), progress=False)
    assert stats["records"] == 5 and stats["kept"] == 1
    assert stats["skipped"] == {"bad_json": 1, "not_object": 1, "missing_field": 1, "too_short": 1}


def test_length_filters_and_validation():
    f = LengthFilter(min_chars=3, max_chars=10, min_tokens=2, max_tokens=5)
    assert f.reason("ab", 1) == "too_short"
    assert f.reason("abcdefghijk", 3) == "too_long"
    assert f.reason("abcd", 1) == "too_short"
    assert f.reason("abcdef", 6) == "too_long"
    assert f.reason("abcdef", 3) is None
    with pytest.raises(ConfigError, match="--max-chars"):
        LengthFilter(min_chars=10, max_chars=5).validate()


def test_percentiles_are_exact_nearest_rank():
    values = list(range(1, 101))
    p = percentiles(Counter(values))
    assert p == {"p0": 1, "p10": 10, "p50": 50, "p90": 90, "p99": 99, "p100": 100}
    assert percentiles(Counter()) == {}


def test_chunk_lengths_follow_the_chunker(tmp_path):
    text = " ".join(f"word{i}" for i in range(900))  # ~1.3k estimated tokens
    pieces = chunk_text(text, 100)
    lengths = chunk_lengths(-(-len(text) // 4), 100)
    assert len(pieces) == len(lengths) and sum(lengths) == -(-len(text) // 4)
    assert max(lengths) <= 100


def test_stats_counts_chunks_and_tokens_with_a_tokenizer(tmp_path, tiny_lm):
    _, tokenizer, _ = tiny_lm  # one token per character
    rows = [{"text": "x" * n} for n in (30, 50, 250)]
    path = write_lines(tmp_path / "c.jsonl", rows)
    stats = corpus_stats(
        KnowledgeConfig(path=str(path), chunk_tokens=100), LengthFilter(), tokenizer, progress=False
    )
    assert stats["record_tokens"]["p0"] == 30 and stats["record_tokens"]["p100"] == 250
    assert stats["chunks"] == 1 + 1 + 3 and stats["total_tokens"] == 330
    assert stats["chunk_token_lengths"]["p100"] == 84  # 250 tokens in 3 near-equal chunks
    sampler = PassageSampler(KnowledgeConfig(path=str(path), chunk_tokens=100), tokenizer=tokenizer)
    assert len(chunk_text(sampler._record(2)[2], 100, tokenizer)) == 3


def test_text_and_folder_corpora_stream_in_order(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_text(
        "second file block one is long enough\n\nsecond block two is long too\n"
    )
    write_lines(tmp_path / "d" / "a.jsonl", [{"text": "first file record, long enough"}])
    records = list(iter_records(KnowledgeConfig(path=str(tmp_path / "d"))))
    assert [(r.source, r.index) for r in records] == [("a.jsonl", 0), ("b.txt", 0), ("b.txt", 1)]
    assert records[2].text == "second block two is long too"


def test_near_duplicates_are_found_and_distinct_texts_kept():
    rng = random.Random(0)
    base = words(rng, 200)
    edited = base.split()
    edited[100] = "changed"  # one word of 200: Jaccard of 5-grams ~ 0.95
    deduper = Deduplicator(DedupConfig(threshold=0.8))
    assert deduper.check(base) is None
    assert deduper.check("  " + base.upper() + " ") == "exact_duplicate"
    assert deduper.check(" ".join(edited)) == "near_duplicate"
    distinct = [deduper.check(words(rng, 200)) for _ in range(200)]
    assert distinct.count(None) == 200  # unrelated texts: no false positive in 200
    half = base.split()[:100] + words(rng, 100).split()  # Jaccard ~ 0.32: not a near duplicate
    assert deduper.check(" ".join(half)) is None


def test_bands_find_pairs_at_the_threshold():
    for threshold in (0.5, 0.7, 0.8, 0.9):
        bands, rows = DedupConfig(threshold=threshold).bands_rows()
        assert bands * rows <= 128
        assert (1 - threshold**rows) ** bands <= 0.01  # candidates are verified: recall comes first
        assert (1 - threshold ** (rows + 1)) ** (128 // (rows + 1)) > 0.01  # and no more candidates than that
    assert shingles("one two", 5) == {"one two"}


def test_dedup_corpus_writes_first_of_each_group(tmp_path):
    rng = random.Random(1)
    texts = [words(rng, 60) for _ in range(20)]
    rows = [{"text": t, "n": i} for i, t in enumerate(texts)]
    rows += [
        {"text": texts[3], "n": 100},
        {"text": texts[5] + " extra", "n": 101},
        {"text": "tiny", "n": 102},
    ]
    src = write_lines(tmp_path / "c.jsonl", rows)
    out = tmp_path / "clean.jsonl"
    counts = dedup_corpus(KnowledgeConfig(path=str(src)), LengthFilter(), DedupConfig(), out, progress=False)
    kept = read_jsonl(out)
    assert [r["n"] for r in kept] == list(range(20))  # originals kept, in order, whole records
    assert counts["exact_duplicate"] == 1 and counts["near_duplicate"] == 1 and counts["too_short"] == 1
    assert counts["kept"] == 20 and counts["records"] == 23


def test_cli_stats_dedup_sample(tmp_path, capsys):
    rng = random.Random(2)
    rows = [{"question": words(rng, 30), "answer": str(i)} for i in range(12)]
    src = write_lines(tmp_path / "c.jsonl", rows + rows[:3])
    field = "{question} Answer: {answer}"
    assert (
        main(
            [
                "kb",
                "stats",
                str(src),
                "--text-field",
                field,
                "--no-progress",
                "--json",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["records"] == 15 and stats["kept"] == 15 and stats["mb_per_s"] > 0
    capsys.readouterr()
    assert (
        main(
            [
                "kb",
                "dedup",
                str(src),
                "--text-field",
                field,
                "--out",
                str(tmp_path / "o.jsonl"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(read_jsonl(tmp_path / "o.jsonl")) == 12
    capsys.readouterr()
    argv = ["kb", "sample", str(src), "--text-field", field, "--n", "3", "--seed", "7", "--json-lines"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first  # deterministic
    shown = [json.loads(line) for line in first.splitlines()]
    sampler = PassageSampler(KnowledgeConfig(path=str(src), text_field=field, seed=7))
    assert [s["id"] for s in shown] == [
        sampler.sample(step)[0].id for step in range(3)
    ]  # what training draws


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["kb", "stats", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    src = write_lines(tmp_path / "c.jsonl", [{"text": "a passage that is long enough"}])
    assert main(["kb", "dedup", str(src), "--out", str(src)]) == 2
    assert main(["kb", "stats", str(src), "--max-chars", "3", "--no-progress"]) == 2


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["kb", "dedup", "--help"])
    out = capsys.readouterr().out
    assert "default: 0.8" in out and "default: 128" in out


@needs_corpus
def test_college_math_stats_and_dedup(tmp_path):
    cfg = KnowledgeConfig(path=str(COLLEGE_MATH), text_field="{question} Answer: {answer}")
    stats = corpus_stats(cfg, LengthFilter(), progress=False)
    assert stats["records"] == 2818
    assert stats["kept"] + sum(stats["skipped"].values()) == 2818
    assert stats["bytes"] == COLLEGE_MATH.stat().st_size
    counts = dedup_corpus(cfg, LengthFilter(), DedupConfig(), tmp_path / "o.jsonl", progress=False)
    assert counts["kept"] == len(read_jsonl(tmp_path / "o.jsonl")) <= stats["kept"]


def near_identical_lines(rng: random.Random, bases: int = 12, variants: int = 24, n: int = 120) -> list[str]:
    """Lines of `n` words: each base with 0..6 words replaced (word 5-gram Jaccard with it from 1 to ~0.6)."""
    lines = []
    for _ in range(bases):
        base = words(rng, n).split()
        for _ in range(variants):
            line = list(base)
            for at in rng.sample(range(n), rng.randrange(7)):
                line[at] = f"x{rng.randrange(10**6)}"
            lines.append(" ".join(line))
    rng.shuffle(lines)
    return lines


def true_jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a, 5), shingles(b, 5)
    return len(sa & sb) / len(sa | sb)


def test_dedup_drops_pairs_at_or_above_the_threshold_and_keeps_pairs_below(tmp_path):
    lines = near_identical_lines(random.Random(7))
    src = write_lines(tmp_path / "near.jsonl", [{"text": t, "n": i} for i, t in enumerate(lines)])
    out = tmp_path / "clean.jsonl"
    counts = dedup_corpus(KnowledgeConfig(path=str(src)), LengthFilter(), DedupConfig(), out, progress=False)
    kept = [r["n"] for r in read_jsonl(out)]
    dropped = sorted(set(range(len(lines))) - set(kept))
    assert counts["near_duplicate"] > 20 and counts["near_below_threshold"] > 20  # both sides are exercised
    for i in dropped:  # each dropped line has a kept line before it at or above the threshold
        assert max(true_jaccard(lines[i], lines[j]) for j in kept if j < i) >= 0.8
    for a, i in enumerate(kept):  # no two kept lines at or above it
        assert all(true_jaccard(lines[i], lines[j]) < 0.8 for j in kept[:a])


def test_dedup_flags_are_bounded_at_validation(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_lines(folder / "a.jsonl", [{"text": "a passage that is long enough to keep"}])
    cases = [
        (["--num-perm", "20000000", "--out", str(tmp_path / "o.jsonl")], "--num-perm: must be in [2, 4096]"),
        (["--out", str(tmp_path)], "is a folder; give a file path"),
        (["--out", str(folder / "clean.jsonl")], "is inside the corpus folder"),
    ]
    for flags, says in cases:
        assert main(["kb", "dedup", str(folder), "--no-progress", *flags]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and says in err[0], err
    assert sorted(p.name for p in folder.iterdir()) == ["a.jsonl"]
    assert not (tmp_path / "o.jsonl").exists()
