"""`pasodoble kb stats | dedup | sample CORPUS`: summarise, deduplicate and preview a knowledge corpus.

    pasodoble kb stats corpus.jsonl --text-field "{question} Answer: {answer}"
    pasodoble kb dedup corpus.jsonl --out clean.jsonl --threshold 0.8
    pasodoble kb sample corpus.jsonl --n 5 --seed 0

CORPUS is anything `knowledge.path` takes (a JSONL / Parquet / text file, a folder of them, `hf:org/name`). The
preview draws passages with `PassageSampler`, so `--seed S` shows the passages of steps 0..n-1 of a run with
`knowledge.seed=S` and the same text field, chunk size and tokenizer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pasodoble.core.knowledge import KnowledgeConfig, PassageSampler
from pasodoble.errors import UserError
from pasodoble.io import write_json_atomic
from pasodoble.kb.dedup import DedupConfig, dedup_corpus
from pasodoble.kb.stream import LengthFilter, corpus_stats


def _knowledge(args: argparse.Namespace) -> KnowledgeConfig:
    cfg = KnowledgeConfig(
        path=args.corpus,
        text_field=args.text_field,
        chunk_tokens=args.chunk_tokens,
        min_chars=args.min_chars,
        seed=getattr(args, "seed", 0),
    )
    cfg.validate()
    return cfg


def _filter(args: argparse.Namespace) -> LengthFilter:
    return LengthFilter(args.min_chars, args.max_chars, args.min_tokens, args.max_tokens)


def _tokenizer(args: argparse.Namespace):
    if args.tokenizer is None:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(args.tokenizer)
    except (OSError, ValueError) as err:
        raise UserError(f"--tokenizer {args.tokenizer}: cannot load a tokenizer there ({err})") from None


def run_stats(args: argparse.Namespace) -> int:
    stats = corpus_stats(_knowledge(args), _filter(args), _tokenizer(args), progress=not args.no_progress)
    if args.json is not None:
        write_json_atomic(args.json, stats)
    print(json.dumps(stats, indent=2))
    return 0


def check_out(corpus: Path, out: Path) -> None:
    """`--out` must be a file path outside the corpus: the corpus itself would be replaced, and a file inside a
    corpus folder would be read back as input by the next run."""
    if out.is_dir():
        raise UserError(f"--out {out}: is a folder; give a file path, e.g. {out / 'clean.jsonl'}")
    if out.resolve() == corpus.resolve():
        raise UserError("--out is the corpus itself; write the deduplicated corpus to another file")
    if corpus.is_dir() and out.resolve().is_relative_to(corpus.resolve()):
        raise UserError(
            f"--out {out}: is inside the corpus folder {corpus}, where the next run would read it as input; "
            "write it outside that folder"
        )


def run_dedup(args: argparse.Namespace) -> int:
    dedup = DedupConfig(
        exact=not args.no_exact,
        near=not args.no_near,
        threshold=args.threshold,
        num_perm=args.num_perm,
        shingle_words=args.shingle_words,
    )
    check_out(Path(args.corpus), Path(args.out))
    dedup.validate()  # before the corpus is opened
    counts = dedup_corpus(
        _knowledge(args),
        _filter(args),
        dedup,
        Path(args.out),
        tokenizer=_tokenizer(args),
        progress=not args.no_progress,
    )
    print(json.dumps(counts, indent=2))
    return 0


def run_sample(args: argparse.Namespace) -> int:
    cfg = _knowledge(args)
    sampler = PassageSampler(cfg, tokenizer=_tokenizer(args))
    for step in range(args.n):
        for passage in sampler.sample(step):
            if args.json_lines:
                print(json.dumps({"step": step, "id": passage.id, "text": passage.text}, ensure_ascii=False))
                continue
            text = (
                passage.text
                if len(passage.text) <= args.show_chars
                else passage.text[: args.show_chars] + " ..."
            )
            print(f"--- step {step}  {passage.id}  ({len(passage.text)} characters)\n{text}")
    sys.stdout.flush()
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    defaults, lengths = KnowledgeConfig(), LengthFilter()
    p.add_argument(
        "corpus", metavar="CORPUS", help="JSONL / Parquet / text file, a folder of them, or hf:org/name"
    )
    p.add_argument(
        "--text-field",
        default=defaults.text_field,
        help="field holding the passage, or a template such as '{question} Answer: {answer}'",
    )
    p.add_argument("--chunk-tokens", type=int, default=defaults.chunk_tokens, help="tokens per chunk")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer folder or id for token counts (none: ~4 characters per token)",
    )
    p.add_argument("--min-chars", type=int, default=lengths.min_chars, help="skip shorter records")
    p.add_argument("--max-chars", type=int, default=None, help="skip longer records")
    p.add_argument("--min-tokens", type=int, default=None, help="skip records with fewer tokens")
    p.add_argument("--max-tokens", type=int, default=None, help="skip records with more tokens")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(subparsers) -> None:
    kb = subparsers.add_parser("kb", help="knowledge-corpus tools: stats, dedup, sample")
    commands = kb.add_subparsers(dest="kb_command", metavar="<kb command>", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    stats = commands.add_parser(
        "stats", help="records, chunks, token lengths, skips, MB/s", formatter_class=fmt
    )
    _common(stats)
    stats.add_argument("--json", type=Path, default=None, help="also write the summary to this file")
    stats.set_defaults(func=run_stats)

    dedup = commands.add_parser("dedup", help="drop exact and near duplicates (MinHash)", formatter_class=fmt)
    _common(dedup)
    d = DedupConfig()
    dedup.add_argument("--out", required=True, help="JSONL file for the kept records")
    dedup.add_argument(
        "--threshold", type=float, default=d.threshold, help="Jaccard similarity of near duplicates"
    )
    dedup.add_argument("--num-perm", type=int, default=d.num_perm, help="MinHash permutations")
    dedup.add_argument("--shingle-words", type=int, default=d.shingle_words, help="words per shingle")
    dedup.add_argument("--no-exact", action="store_true", help="keep exact duplicates")
    dedup.add_argument("--no-near", action="store_true", help="keep near duplicates")
    dedup.set_defaults(func=run_dedup)

    sample = commands.add_parser(
        "sample", help="deterministic preview of training passages", formatter_class=fmt
    )
    _common(sample)
    sample.add_argument("--n", type=int, default=5, help="passages to show (steps 0..n-1)")
    sample.add_argument("--seed", type=int, default=0, help="knowledge.seed of the run to preview")
    sample.add_argument("--show-chars", type=int, default=600, help="characters shown per passage")
    sample.add_argument("--json-lines", action="store_true", help="one JSON object per passage")
    sample.set_defaults(func=run_sample)
