"""The grader against plain math-verify on real model outputs: the samples files of `pasodoble eval` runs.

Each samples row holds a (gold, response) pair that a real model wrote. A dual-play run's samples.jsonl works too:
its pairs are the Proposer's answer (as the gold) and each Solver response to that question. The script grades every pair twice:
the way `pasodoble eval` grades it (the golds as the eval loader read them, its default grader settings) and with
math-verify's defaults, `verify(parse(gold), parse(response))`, where the gold is given as `\\boxed{gold}` so that a
plain LaTeX or number gold parses as math-verify's own benchmarks feed it. It prints the 2x2 table, then every
disagreement with what each side read, so that each one can be judged by hand (whose error, which kind).

    python bench/real_grading.py RUN/samples.jsonl [MORE.jsonl ...] [--show 40] [--out disagreements.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from math_verify import parse, verify

from pasodoble.evals.cli import eval_grader_config
from pasodoble.grader import Grader
from pasodoble.jsonl import iter_jsonl


def load_pairs(paths: list[Path]) -> list[dict]:
    """{source, id, golds, response} per samples row (rows without a response or gold are counted and skipped)."""
    pairs, skipped = [], 0
    for path in paths:
        for _, row, _ in iter_jsonl(path):
            if isinstance(row, dict) and "solver_answers" in row:  # a dual-play samples row
                pairs += dualplay_pairs(row, path)
                continue
            golds = row.get("gold") if isinstance(row, dict) else None
            if not golds or not isinstance(row.get("response"), str):
                skipped += 1
                continue
            golds = [str(g) for g in (golds if isinstance(golds, list) else [golds])]
            pairs.append({"source": row.get("source", path.stem), "id": row.get("id"), "golds": golds,
                          "response": row["response"]})  # fmt: skip
    if skipped:
        print(f"{skipped} rows without a gold or response skipped", file=sys.stderr)
    return pairs


def dualplay_pairs(row: dict, path: Path) -> list[dict]:
    """The pairs of a dual-play samples row: the Proposer's answer as the gold, each Solver response against it
    (rows without a valid proposal have no answer and give none)."""
    answer = row.get("answer")
    if row.get("invalid_reason") or not isinstance(answer, str) or not answer.strip():
        return []
    return [
        {
            "source": "dualplay",
            "id": f"{path.parent.name}:{row.get('step')}:{i}",
            "golds": [answer],
            "response": response,
        }
        for i, response in enumerate(row["solver_answers"])
        if isinstance(response, str)
    ]


def ours(pairs: list[dict]) -> list[tuple[bool, str | None]]:
    """(correct, extracted) as `pasodoble eval` grades: correct if any accepted gold matches."""
    results = []
    with Grader(eval_grader_config()) as grader:
        for pair in pairs:
            golds = pair["golds"]
            verdicts = grader.grade(golds, [pair["response"]] * len(golds), extract=True).verdicts
            best = next((v for v in verdicts if v.correct), verdicts[0])
            results.append((bool(best.correct), best.extracted))
    return results


def theirs(pairs: list[dict]) -> list[tuple[bool, str | None]]:
    """(correct, last parsed value) with math-verify's defaults; any gold may match."""
    results = []
    for pair in pairs:
        predicted = parse(pair["response"])
        correct = any(verify(parse("\\boxed{" + gold + "}"), predicted) for gold in pair["golds"])
        results.append((bool(correct), str(predicted[-1]) if predicted else None))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", type=Path, nargs="+", help="samples.jsonl files of eval or dual-play runs")
    parser.add_argument("--show", type=int, default=60, help="disagreements to print (default: 60)")
    parser.add_argument("--out", type=Path, help="write every disagreement here as JSONL")
    args = parser.parse_args(argv)
    pairs = load_pairs(args.samples)
    if not pairs:
        raise SystemExit("no (gold, response) pairs found in " + ", ".join(map(str, args.samples)))
    a, b = ours(pairs), theirs(pairs)
    table = Counter((x[0], y[0]) for x, y in zip(a, b, strict=True))
    by_source = Counter(p["source"] for p in pairs)
    print(f"{len(pairs)} pairs: " + ", ".join(f"{s} {n}" for s, n in sorted(by_source.items())))
    print("                      math-verify right   math-verify wrong")
    print(f"  grader right        {table[True, True]:>17}   {table[True, False]:>17}")
    print(f"  grader wrong        {table[False, True]:>17}   {table[False, False]:>17}")
    agree = table[True, True] + table[False, False]
    print(f"  agreement: {agree} of {len(pairs)} ({100 * agree / len(pairs):.1f}%)")
    rows = []
    for pair, (mine, read_mine), (its, read_its) in zip(pairs, a, b, strict=True):
        if mine != its:
            rows.append({**pair, "grader": mine, "grader_read": read_mine, "math_verify": its,
                         "math_verify_read": read_its})  # fmt: skip
    for row in rows[: args.show]:
        tail = row["response"][-200:].replace("\n", " ")
        print(
            f"\n[{row['source']} {row['id']}] gold {row['golds']}: grader {row['grader']} read "
            f"{row['grader_read']!r}; math-verify {row['math_verify']} read {row['math_verify_read']!r}\n"
            f"  ...{tail}"
        )
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
