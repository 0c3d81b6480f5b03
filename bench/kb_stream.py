"""Benchmark: stream a large JSONL corpus through `pasodoble kb stats` in bounded memory (peak RSS and MB/s).

Writes a synthetic corpus of `--size-mb` megabytes (math-like records of varied length, some broken lines and some
short records so every skip reason shows) to a temporary folder, then runs `pasodoble kb stats` on it in a fresh
process and prints that process's peak resident memory (`ru_maxrss` of the child) next to the corpus size and the
throughput `kb stats` reports. Memory should stay flat as `--size-mb` grows: only counters are kept.

    python bench/kb_stream.py --size-mb 1024          # the 1 GB figure
    python bench/kb_stream.py --size-mb 20            # a quick smoke run
    python bench/kb_stream.py --size-mb 1024 --tokenizer DIR   # token counts by a real tokenizer (slower)
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [
    "let",
    "the",
    "function",
    "integral",
    "derivative",
    "matrix",
    "prime",
    "sum",
    "series",
    "limit",
    "root",
    "probability",
    "vector",
]


def write_corpus(path: Path, size_mb: float, seed: int = 0) -> int:
    """Write about `size_mb` MB of JSONL; returns the number of lines."""
    rng = random.Random(seed)
    target, written, lines = int(size_mb * 1e6), 0, 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            block = []
            for _ in range(1000):
                kind = rng.random()
                if kind < 0.002:
                    line = '{"text": "broken'
                elif kind < 0.01:
                    line = json.dumps({"text": "short"})
                else:
                    n = int(rng.lognormvariate(5.0, 1.0)) + 5
                    body = " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(n))
                    line = json.dumps({"text": f"Let $x = {rng.randrange(10**6)}$. {body}", "id": lines})
                block.append(line + "\n")
                lines += 1
            data = "".join(block)
            f.write(data)
            written += len(data.encode())
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=float, default=1024.0, help="corpus size in MB (default: 1024)")
    parser.add_argument("--tokenizer", default=None, help="pass --tokenizer to kb stats")
    parser.add_argument("--keep", type=Path, default=None, help="write the corpus here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "corpus.jsonl"
        start = time.perf_counter()
        lines = write_corpus(path, args.size_mb)
        print(
            f"wrote {path.stat().st_size / 1e6:.1f} MB, {lines} lines in {time.perf_counter() - start:.1f} s"
        )
        cmd = [sys.executable, "-m", "pasodoble", "kb", "stats", str(path), "--no-progress"]
        if args.tokenizer:
            cmd += ["--tokenizer", args.tokenizer]
        start = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux
        stats = json.loads(out)
        print(
            f"kb stats: {stats['records']} records, {stats['kept']} kept, skipped {stats['skipped']}, "
            f"{stats['chunks']} chunks, tokens/record {stats['record_tokens']}"
        )
        print(
            f"throughput {stats['mb_per_s']} MB/s (kb stats' own pass), {stats['bytes'] / 1e6 / wall:.1f} MB/s "
            f"with start-up; peak RSS {peak_mb:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
