"""Benchmark: 10,000 hostile strings through every text parser (and hostile files through every JSONL reader).

For each parser of `tests/adversarial/targets.py` (answer extraction, the grader's fast path, the Proposer's output
parser, gold-answer parsing, passage chunking, recipe YAML and dotted overrides, the JSONL line decoder), the same
`--strings` fuzzed strings (tags, boxes, braces, numbers, YAML and JSON syntax, random code points with lone
surrogates, pieces repeated up to 200 times: up to ~10^4 characters) are parsed one call at a time. The table
gives per parser: the calls, the documented errors raised (a `ConfigError` for a bad override is the contract),
the exceptions that escaped (must be 0), and the median and worst-case seconds per call with the length of the
worst input. Then `--files` fuzzed JSONL files (bad bytes, torn lines, 20,000-digit numbers, 5,000-deep nesting,
NaN, lone surrogates) go through every reader the same way. Exit status 1 if any exception escaped.

`--growth` adds the growth table: each parser on inputs of 1 KB, 10 KB, 100 KB and 1 MB made of one structural
piece repeated (`<answer>` x n, `\\boxed{` x n, `{` x n, ...: the unclosed-tag and unbalanced-brace inputs where a
rescan turns quadratic) or of fuzzed text repeated; per size the worst time of one call over those inputs, and the
ratio of the 1 MB worst to the 1 KB worst (a linear parser: about 1,000x; a quadratic one: about 10^6x). The calls
run in a child process killed when one call passes `--cap-s` seconds ("> cap"); that parser's larger sizes are
then skipped.

    nice python bench/fuzz.py                          # 10,000 strings, 300 files, seed 0
    taskset -c 0 python bench/fuzz.py --strings 10000 --files 1000 --growth
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.adversarial.targets import PARSERS, PIECES, READERS, fuzz_jsonl, fuzz_text

GROWTH_SIZES = (1_000, 10_000, 100_000, 1_000_000)  # characters


def _run(name, call, allowed, inputs, describe):
    times, documented, escaped, worst = [], 0, [], (0.0, None)
    for item in inputs:
        start = time.perf_counter()
        try:
            call(item)
        except allowed:
            documented += 1
        except Exception as err:  # the point of the benchmark: count what escapes, keep going
            escaped.append(
                (describe(item), f"{type(err).__name__}: {err}"[:200], traceback.format_exc(limit=-3))
            )
        seconds = time.perf_counter() - start
        times.append(seconds)
        if seconds > worst[0]:
            worst = (seconds, describe(item))
    return {
        "name": name,
        "calls": len(times),
        "documented": documented,
        "escaped": escaped,
        "median_s": statistics.median(times) if times else 0.0,
        "worst_s": worst[0],
        "worst_input": worst[1],
    }


def _table(title, rows, unit):
    print(f"\n{title}")
    print(
        f"| target | calls | documented errors | exceptions | median s/call | worst s/call | worst {unit} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['name']} | {r['calls']:,} | {r['documented']:,} | {len(r['escaped'])} | "
            f"{r['median_s']:.2e} | {r['worst_s']:.2e} | {r['worst_input']} |"
        )


def _growth_inputs(size: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    fuzzed = "".join(fuzz_text(rng) for _ in range(20)) or "x"
    return [(piece * (size // len(piece) + 1))[:size] for piece in [*PIECES, fuzzed]]


def _time_each(name: str, size: int, seed: int, pipe) -> None:
    call, _ = PARSERS[name]
    for text in _growth_inputs(size, seed):
        start = time.perf_counter()
        try:
            call(text)
        except Exception:  # an escape is counted by the fuzz table; here only the time matters
            continue
        finally:
            pipe.send(time.perf_counter() - start)


def _worst_call(context, name: str, size: int, seed: int, cap_s: float) -> float | None:
    """Worst seconds of one call over the inputs of `size`, or None if a call ran past `cap_s`."""
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_time_each, args=(name, size, seed, send))
    child.start()
    worst: float | None = 0.0
    for _ in range(len(PIECES) + 1):
        if not receive.poll(cap_s):
            worst = None
            break
        worst = max(worst, receive.recv())
    child.kill()
    child.join()
    return worst


def _growth(cap_s: float, seed: int) -> None:
    context = multiprocessing.get_context("fork")
    print(
        f"\nGrowth: worst seconds of one call over {len(PIECES) + 1} inputs of each size (cap {cap_s:g} s a call)"
    )
    print("| parser | " + " | ".join(f"{n // 1000:,} KB" for n in GROWTH_SIZES) + " | 1 MB / 1 KB |")
    print("|---|" + "---:|" * (len(GROWTH_SIZES) + 1))
    for name in PARSERS:
        cells, times = [], []
        for size in GROWTH_SIZES:
            if len(times) < len(cells):  # a smaller size already passed the cap
                cells.append("skipped")
                continue
            worst = _worst_call(context, name, size, seed, cap_s)
            if worst is None:
                cells.append(f"> {cap_s:g} s")
            else:
                times.append(worst)
                cells.append(f"{worst:.2e}")
        ratio = f"{times[-1] / max(times[0], 1e-9):,.0f}x" if len(times) == len(GROWTH_SIZES) else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strings", type=int, default=10_000, help="fuzzed strings per parser")
    parser.add_argument("--files", type=int, default=300, help="fuzzed JSONL files per reader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--growth", action="store_true", help="also time 1 KB to 1 MB adversarial inputs")
    parser.add_argument(
        "--cap-s", type=float, default=60.0, help="--growth: seconds allowed per parser and size"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    rng = random.Random(args.seed)
    strings = [fuzz_text(rng) for _ in range(args.strings)]
    print(
        f"{len(strings):,} strings, {sum(map(len, strings)):,} characters, longest {max(map(len, strings)):,}; "
        f"{args.files:,} files; seed {args.seed}"
    )
    rows = [_run(name, call, allowed, strings, len) for name, (call, allowed) in PARSERS.items()]
    _table(f"Parsers: {len(strings):,} fuzzed strings each", rows, "input (chars)")

    reader_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(args.files):
            path = Path(tmp) / f"f{i}" / "data.jsonl"
            path.parent.mkdir()
            path.write_bytes(fuzz_jsonl(rng))
            files.append(path)
        devnull = open("/dev/null", "w")  # noqa: SIM115 (the readers' skip reports, for the whole loop)
        stderr, sys.stderr = sys.stderr, devnull
        try:
            for name, (call, allowed) in READERS.items():
                reader_rows.append(_run(name, call, allowed, files, lambda p: p.stat().st_size))
        finally:
            sys.stderr = stderr
            devnull.close()
    _table(f"JSONL readers: {args.files:,} fuzzed files each", reader_rows, "file (bytes)")

    if args.growth:
        _growth(args.cap_s, args.seed)
    escaped = [(r["name"], e) for r in rows + reader_rows for e in r["escaped"]]
    print(f"\nexceptions escaped: {len(escaped)}")
    for name, (size, message, trace) in escaped[:10]:
        print(f"- {name} (input of {size}): {message}\n{trace}")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
