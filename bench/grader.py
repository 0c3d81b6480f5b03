"""Benchmark: the grader against plain math-verify (`parse` + `verify`) on the same pairs, in the same run.

The answer mix is built from the gold answers of the shared benchmarks (aime24/25, amc23, gsm8k, math500,
minerva_math, olympiadbench; up to `--per-set` golds each, in file order) paired with correct variants (the gold
itself, an equivalent numeric form, `\\dfrac` for `\\frac`, re-spaced LaTeX) and near-miss wrong ones (one digit
changed, off-by-one, a changed numerator). Each answer is wrapped in a model-like worked response that ends in
`\\boxed{}` (three response styles).

Plain math-verify: `verify(parse("\\\\boxed{" + gold + "}"), parse(response))` with its default settings (signal
timeouts, main thread). Grader: `Grader(GraderConfig(num_workers=1)).grade(golds, responses)`; "cold" is a fresh
grader per repeat (empty caches; its worker started and warmed on pairs from other golds before timing, as
math-verify is warmed on the same pairs), "warm" grades the timed pairs again with the same grader. Pin to one core:

    taskset -c 0 python bench/grader.py              # PASODOBLE_DATA_DIR overrides ../shared
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pasodoble.grader import Grader, GraderConfig, extract_boxed, fastpath  # noqa: E402
from pasodoble.grader.fastpath import parse_number  # noqa: E402

SETS = ("aime24", "aime25", "amc23", "gsm8k", "math500", "minerva_math", "olympiadbench")
STEPS = (
    "We start by writing down what is given. Let $a = 3$ and $b = 4$; then $a^2 + b^2 = 25$, so the hypotenuse "
    "is $5$. Next we use the relation from the statement, substitute the values and simplify step by step, "
    "checking each intermediate result (for instance $2 \\cdot 7 = 14$ and $14 - 5 = 9$)."
)
TEMPLATES = (
    "{steps}\n\nTherefore, the answer is \\boxed{{{answer}}}.",
    "{steps}\n\n**Final Answer**\n\\[\n\\boxed{{{answer}}}\n\\]",
    "{steps} Putting everything together we get $\\boxed{{{answer}}}$.",
)


def data_dir() -> Path:
    return Path(os.environ.get("PASODOBLE_DATA_DIR", Path(__file__).resolve().parents[1] / ".." / "shared"))


def gold_answers(root: Path, name: str) -> list[str]:
    rows = [json.loads(line) for line in (root / "benchmarks" / name / "test.jsonl").open(encoding="utf-8")]
    if name == "gsm8k":
        return [row["answer"].split("####")[-1].strip() for row in rows]
    if name == "minerva_math":
        return [answer for row in rows if (answer := extract_boxed(row["solution"]))]
    if name == "olympiadbench":
        return [", ".join(a.strip().strip("$").strip() for a in row["final_answer"]) for row in rows]
    return [str(row["answer"]).strip() for row in rows]


def _bump_digit(text: str) -> str:
    match = re.search(r"\d", text)
    if match is None:
        return f"{text}+1" if text else "1"
    digit = str((int(match.group()) + 1) % 10)
    return text[: match.start()] + digit + text[match.end() :]


def variants(gold: str) -> list[tuple[str, bool]]:
    """(answer, expected-correct-by-construction) pairs: the verdicts themselves come from math-verify."""
    out = [(gold, True), (_bump_digit(gold), False)]
    number = parse_number(gold)
    if number is not None:
        value, _ = number
        out.append(
            (f"{float(value):.6f}".rstrip("0").rstrip(".") if value.denominator != 1 else f"{value}.0", True)
        )
        out.append((str(value.numerator + value.denominator), False))
    elif "\\frac" in gold:
        out.append((gold.replace("\\frac", "\\dfrac"), True))
    else:
        out.append((re.sub(r"\s*([=,])\s*", r" \1 ", gold), True))
    return out


def build_mix(per_set: int, skip: int = 0, sets: tuple[str, ...] = SETS) -> tuple[list[str], list[str]]:
    golds, responses = [], []
    for name in sets:
        for gold in gold_answers(data_dir(), name)[skip : skip + per_set]:
            for answer, _ in variants(gold):
                golds.append(gold)
                responses.append(
                    TEMPLATES[len(responses) % len(TEMPLATES)].format(steps=STEPS, answer=answer)
                )
    return golds, responses


def plain_math_verify(golds: list[str], responses: list[str]) -> list[bool]:
    from math_verify import parse, verify

    return [bool(verify(parse(f"\\boxed{{{g}}}"), parse(r))) for g, r in zip(golds, responses, strict=True)]


def timed(function, repeats: int):
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return seconds, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-set", type=int, default=150, help="golds taken from each benchmark")
    parser.add_argument("--warmup-per-set", type=int, default=10, help="other golds graded before timing")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated benchmark names")
    parser.add_argument("--repeats", type=int, default=3, help="timings are the median of this many runs")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    sets = tuple(args.sets.split(","))
    golds, responses = build_mix(args.per_set, sets=sets)
    # Warm-up pairs from other golds: both sides start timing with a warm parser, none of the timed pairs cached.
    warmup = build_mix(args.warmup_per_set, skip=args.per_set, sets=sets)
    print(f"pairs: {len(golds)} ({len(set(golds))} distinct golds), cores: {sorted(os.sched_getaffinity(0))}")

    plain_math_verify(*warmup)
    mv_runs, expected = timed(lambda: plain_math_verify(golds, responses), args.repeats)

    cold_runs, counters = [], {}
    for _ in range(args.repeats):
        grader = Grader(GraderConfig(num_workers=1)).start()
        grader.grade(*warmup)  # starts and warms the worker outside the timing
        grader.clear_cache()
        fastpath.normalised.cache_clear()
        start = time.perf_counter()
        batch = grader.grade(golds, responses)
        cold_runs.append(time.perf_counter() - start)
        counters = batch.counters
    warm_runs, warm = timed(lambda: grader.grade(golds, responses), args.repeats)
    grader.close()
    mv_s, cold_s, warm_s = (statistics.median(runs) for runs in (mv_runs, cold_runs, warm_runs))

    got = [v.correct for v in batch.verdicts]
    disagreements = [i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b]
    warm_disagreements = sum(a != v.correct for a, v in zip(expected, warm.verdicts, strict=True))
    agreement = 100.0 * (len(golds) - len(disagreements)) / len(golds)
    print(f"math-verify correct: {sum(expected)}/{len(expected)}")
    print(f"{'route':<22}{'seconds':>10}{'pairs/s':>10}{'ratio':>8}")
    print(f"{'math-verify':<22}{mv_s:>10.2f}{len(golds) / mv_s:>10.0f}{1.0:>8.1f}")
    print(f"{'grader cold cache':<22}{cold_s:>10.2f}{len(golds) / cold_s:>10.0f}{mv_s / cold_s:>8.1f}")
    print(f"{'grader warm cache':<22}{warm_s:>10.2f}{len(golds) / warm_s:>10.0f}{mv_s / warm_s:>8.1f}")
    for name, runs in (("math-verify", mv_runs), ("grader cold", cold_runs), ("grader warm", warm_runs)):
        print(f"  {name} runs (s): {', '.join(f'{run:.2f}' for run in runs)}")
    print(f"cold counters: {counters}")
    print(f"agreement: {agreement:.2f}% ({len(disagreements)} disagreements cold, {warm_disagreements} warm)")
    for i in disagreements:
        verdict = batch.verdicts[i]
        print(
            f"  gold={golds[i]!r} extracted={verdict.extracted!r} math-verify={expected[i]} grader={got[i]} "
            f"status={verdict.status}"
        )
    return 0 if not disagreements else 1


if __name__ == "__main__":
    sys.exit(main())
