"""Benchmark: the grader against plain math-verify (`parse` + `verify`) on the same pairs, in the same run.

The answer mix is built from the gold answers of the shared benchmarks (aime24/25, amc23, gsm8k, math500,
minerva_math, olympiadbench; up to `--per-set` golds each, in file order) paired with correct variants (the gold
itself, an equivalent numeric form, `\\dfrac` for `\\frac`, re-spaced LaTeX) and near-miss wrong ones (one digit
changed, off-by-one, a changed numerator). Each answer is wrapped in a model-like worked response that ends in
`\\boxed{}` (three response styles). `--extra-wrong N` adds N more wrong answers per gold (`gold+1`, ...), as when
several sampled responses to one problem are graded: golds then repeat within a batch, as in evaluation and RL.
`--shortcuts` times math-verify itself with and without the workers' shortcuts on minerva's equation golds.

Plain math-verify: `verify(parse("\\\\boxed{" + gold + "}"), parse(response))` with its default settings (signal
timeouts, main thread), each repeat in a fresh process warmed on pairs from other golds. Grader:
`Grader(GraderConfig(num_workers=1)).grade(golds, responses)`; "cold" is a fresh grader per repeat (empty caches; its
worker started and warmed on the same other pairs before timing), "warm" grades the timed pairs again with the same
grader. Each set is one batch; the "all" row sums the per-set medians. Wall seconds swing with other load on the
machine, so CPU seconds (grader: parent plus worker processes) are printed too. Two bounds follow: "ceiling" is what
plain math-verify spends on the pairs the grader hands to its workers (a grader handing those to plain math-verify
could not beat that ratio; the workers run math-verify with verdict-keeping shortcuts,
`pasodoble/grader/shortcuts.py`), and "floor" is what parsing alone costs on those pairs (no grader that decides
them from math-verify's parse can beat that ratio, however fast it compares). Agreement is printed twice: with
math-verify on the whole responses (what plain math-verify gives) and on the extracted answers,
`verify(parse("\\\\boxed{gold}"), parse("\\\\boxed{answer}"))`, which is what the grader computes by design; the two
differ only where math-verify reads another formula from the whole response than from its boxed answer. The exit
status is 1 if either shows a disagreement. `--per-set 1400` takes every gold answer. Pin to one core:

    taskset -c 0 python bench/grader.py              # PASODOBLE_DATA_DIR overrides ../shared
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import re
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pasodoble.grader import Grader, GraderConfig, extract_answer, extract_boxed, fastpath
from pasodoble.grader.fastpath import parse_number
from pasodoble.grader.goldforms import rounded_fractions

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

# Warm-up golds that are in no benchmark file, graded by both sides before timing.
WARMUP_GOLDS = ("\\frac{1}{2}", "x^2+1", "(1, 2)", "x = 3", "\\sqrt{2}", "[0, 1)", "2\\pi", "y = 2x - 1")


def data_dir() -> Path:
    return Path(os.environ.get("PASODOBLE_DATA_DIR", Path(__file__).resolve().parents[1] / ".." / "shared"))


def gold_answers(root: Path, name: str) -> list[str]:
    """A set's gold answers as written in its file (`2,125`, `27.0`, a trailing newline), not as
    `pasodoble.evals.load_benchmark` normalises them: raw forms are part of what the grader has to handle."""
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


def variants(gold: str, extra_wrong: int = 0) -> list[tuple[str, bool]]:
    """(answer, expected-correct-by-construction) pairs: the verdicts themselves come from math-verify.

    `extra_wrong` adds that many more wrong answers (`gold+1`, `gold+2`, ...), as when several sampled responses
    to one problem are graded against the same gold."""
    out = [(gold, True), (_bump_digit(gold), False)]
    out += [(f"{gold}+{k}", False) for k in range(1, extra_wrong + 1)]
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


def build_mix(
    per_set: int, skip: int = 0, sets: tuple[str, ...] = SETS, extra_wrong: int = 0
) -> tuple[list[str], list[str]]:
    golds, responses = [], []
    for name in sets:
        for gold in gold_answers(data_dir(), name)[skip : skip + per_set]:
            for answer, _ in variants(gold, extra_wrong):
                golds.append(gold)
                responses.append(
                    TEMPLATES[len(responses) % len(TEMPLATES)].format(steps=STEPS, answer=answer)
                )
    return golds, responses


def plain_math_verify(
    golds: list[str], responses: list[str], seconds: list[float] | None = None
) -> list[bool]:
    """math-verify's verdicts; when `seconds` is given, each pair's time is appended to it."""
    from math_verify import parse, verify

    verdicts = []
    for gold, response in zip(golds, responses, strict=True):
        start = time.perf_counter()
        verdicts.append(bool(verify(parse(f"\\boxed{{{gold}}}"), parse(response))))
        if seconds is not None:
            seconds.append(time.perf_counter() - start)
    return verdicts


def answer_verdicts(mix: dict) -> dict[str, list[bool]]:
    """math-verify's verdicts on the extracted answers, `verify(parse("\\boxed{gold}"), parse("\\boxed{answer}"))`:
    what the grader computes by design (it grades a response's final answer, not every formula in the response)."""
    from math_verify import parse, verify

    from pasodoble.grader.worker import wrap

    known: dict[tuple[str, str | None], bool] = {}
    verdicts = {}
    for name, (golds, responses) in mix.items():
        verdicts[name] = []
        for gold, response in zip(golds, responses, strict=True):
            key = (gold.strip(), extract_answer(response)[0])
            if key not in known:
                known[key] = key[1] is not None and bool(verify(parse(wrap(key[0])), parse(wrap(key[1]))))
            verdicts[name].append(known[key])
    return verdicts


def disagreements(expected: dict[str, list[bool]], got: dict[str, list[bool]]) -> list[tuple[str, int]]:
    """(set, index) of every pair whose two verdict lists differ."""
    return [
        (name, i)
        for name in expected
        for i, (a, b) in enumerate(zip(expected[name], got[name], strict=True))
        if a != b
    ]


def worker_cpu_s(grader: Grader) -> float:
    """CPU seconds of the grader's live workers plus every reaped child (killed workers) so far (Linux)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = children.ru_utime + children.ru_stime
    for worker in grader._workers()._workers:
        if worker.process is not None and worker.process.poll() is None:
            fields = Path(f"/proc/{worker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def routed_to_math_verify(golds: list[str], responses: list[str]) -> list[bool]:
    """Which pairs a cold grader sends to a worker: not fast-path decided, first of their (gold, answer)."""
    seen, routed, places = set(), [], GraderConfig().rounded_answers
    for gold, response in zip(golds, responses, strict=True):
        gold, answer = gold.strip(), extract_answer(response)[0]
        key = (rounded_fractions(gold, answer or "", places) or gold, answer)
        routed.append(key not in seen and fastpath.fast_verdict(*key) is None)
        seen.add(key)
    return routed


def in_fresh_process(function, *args):
    """`function(*args)` in a newly spawned interpreter: no parser state or SymPy cache carried over from earlier
    timings, as for the grader's cold worker (started anew each repeat)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def _math_verify_pass(mix: dict, warmup: tuple) -> tuple[dict, dict, float, dict]:
    """One timed pass of plain math-verify over the mix, after the warm-up pairs (runs in a fresh process):
    per-set wall seconds, verdicts, CPU seconds, and per-set lists of each pair's wall seconds."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    plain_math_verify(*warmup)
    seconds, verdicts, per_pair = {}, {}, {}
    cpu_start = time.process_time()
    for name, (golds, responses) in mix.items():
        start = time.perf_counter()
        per_pair[name] = []
        verdicts[name] = plain_math_verify(golds, responses, per_pair[name])
        seconds[name] = time.perf_counter() - start
    return seconds, verdicts, time.process_time() - cpu_start, per_pair


def time_math_verify(mix: dict, warmup: tuple, repeats: int) -> tuple[dict, dict, float, dict]:
    """Per-set wall seconds (one list per set), verdicts, median CPU seconds and the last repeat's per-pair
    seconds of plain math-verify, each repeat in a fresh process warmed on the warm-up pairs (repeats in one process
    would find the timed pairs' parses and SymPy results cached: about 14% less time)."""
    per_set: dict[str, list[float]] = {name: [] for name in mix}
    verdicts, cpu, per_pair = {}, [], {}
    for _ in range(repeats):
        seconds, verdicts, spent, per_pair = in_fresh_process(_math_verify_pass, mix, warmup)
        for name, value in seconds.items():
            per_set[name].append(value)
        cpu.append(spent)
    return per_set, verdicts, statistics.median(cpu), per_pair


def whole(mix: dict) -> tuple[list[str], list[str]]:
    """The mix as one list of golds and one of responses (the grader's cache spans the per-set batches)."""
    golds = [gold for set_golds, _ in mix.values() for gold in set_golds]
    responses = [response for _, set_responses in mix.values() for response in set_responses]
    return golds, responses


def routed_pairs(mix: dict) -> tuple[list[str], list[str]]:
    """(golds, responses) of the pairs a cold grader hands to its worker, over the whole mix."""
    golds, responses = whole(mix)
    routed = routed_to_math_verify(golds, responses)
    pairs = [pair for pair, flag in zip(zip(golds, responses), routed, strict=True) if flag]
    return [gold for gold, _ in pairs], [response for _, response in pairs]


def time_routed_math_verify(mix: dict, warmup: tuple, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of plain math-verify (fresh process) on just the pairs the grader hands over."""
    routed = {"routed": routed_pairs(mix)}
    runs = [in_fresh_process(_math_verify_pass, routed, warmup) for _ in range(repeats)]
    return statistics.median(r[0]["routed"] for r in runs), statistics.median(r[2] for r in runs)


def _parse_pass(golds: list[str], answers: list[str], warmup: tuple) -> tuple[float, float]:
    """CPU seconds of the workers' parser (math-verify's `parse` with `sll.py`) on the distinct golds and the
    answers, in a fresh process warmed by parsing every warm-up pair; then the same parses again."""
    from math_verify import parse

    from pasodoble.grader import sll
    from pasodoble.grader.worker import wrap

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    sll.install()
    for gold, response in zip(*warmup, strict=True):
        parse(wrap(gold.strip()), parsing_timeout=None)
        parse(wrap(extract_answer(response)[0]), parsing_timeout=None)
    spent = []
    for _ in range(2):
        cpu_start = time.process_time()
        for text in golds + answers:
            parse(wrap(text), parsing_timeout=None)
        spent.append(time.process_time() - cpu_start)
    return spent[0], spent[1]


def time_parse_floor(mix: dict, warmup: tuple, repeats: int) -> tuple[int, int, float, float]:
    """What parsing alone costs the grader's worker on the pairs it is handed: a floor under any grader that
    decides those pairs from math-verify's parse. Returns (answers, distinct golds, first CPU s, again CPU s)."""
    golds, responses = routed_pairs(mix)
    distinct = list(dict.fromkeys(gold.strip() for gold in golds))
    answers = [extract_answer(response)[0] for response in responses]
    runs = [in_fresh_process(_parse_pass, distinct, answers, warmup) for _ in range(repeats)]
    return (
        len(answers),
        len(distinct),
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
    )


def answer_kind(gold: str) -> str:
    """Rough shape of a gold answer, for the time breakdown: number, relation, list or expression."""
    if parse_number(gold) is not None:
        return "number"
    if re.search(r"=|<|>|\\le|\\ge|\\ne", gold):
        return "relation"
    if "," in gold or "$" in gold:
        return "list"
    return "expression"


def time_by_kind(mix: dict, per_pair: dict) -> list[tuple[str, int, float, int, float]]:
    """Where plain math-verify spends its time, from each pair's seconds in one timed pass: per (answer kind,
    routed or fast-path decided).

    Rows: (label, pairs, math-verify seconds, of which timed-out pairs, share of the total time).
    """
    rows: dict[str, list] = {}
    golds, responses = whole(mix)
    seconds = [spent for name in mix for spent in per_pair[name]]
    routed = routed_to_math_verify(golds, responses)
    for gold, spent, flag in zip(golds, seconds, routed, strict=True):
        row = rows.setdefault(
            f"{answer_kind(gold)}/{'math-verify' if flag else 'fast path or cache'}", [0, 0.0, 0]
        )
        row[0] += 1
        row[1] += spent
        row[2] += spent > 4.5  # math-verify's own 5 s comparison limit
    total = sum(row[1] for row in rows.values())
    return [(label, n, spent, slow, spent / total) for label, (n, spent, slow) in sorted(rows.items())]


def time_grader(mix: dict, warmup: tuple, repeats: int) -> tuple[dict, dict, dict, Counter, float]:
    """Cold and warm per-set wall seconds, the last cold verdicts, summed cold counters and median cold CPU s."""
    cold: dict[str, list[float]] = {name: [] for name in mix}
    warm: dict[str, list[float]] = {name: [] for name in mix}
    verdicts, counters, cpu = {}, Counter(), []
    for _ in range(repeats):
        grader = Grader(GraderConfig(num_workers=1)).start()
        grader.grade(*warmup)  # starts and warms the worker outside the timing
        grader.clear_cache()
        fastpath.normalised.cache_clear()
        counters = Counter()
        cpu_start = time.process_time() + worker_cpu_s(grader)
        for name, (golds, responses) in mix.items():
            start = time.perf_counter()
            batch = grader.grade(golds, responses)
            cold[name].append(time.perf_counter() - start)
            verdicts[name] = [verdict.correct for verdict in batch.verdicts]
            counters.update(batch.counters)
        cpu.append(time.process_time() + worker_cpu_s(grader) - cpu_start)
        for name, (golds, responses) in mix.items():
            start = time.perf_counter()
            batch = grader.grade(golds, responses)
            warm[name].append(time.perf_counter() - start)
            assert [v.correct for v in batch.verdicts] == verdicts[name], "warm verdicts changed"
        grader.close()
    return cold, warm, verdicts, counters, statistics.median(cpu)


def time_shortcuts(per_set: int, repeats: int) -> None:
    """In one process: math-verify's `verify` on minerva's equation golds against four wrong answers each, plain,
    with the numeric disproof only, and with the disproof and the solve memo (`pasodoble/grader/shortcuts.py`)."""
    import math_verify.grader as math_verify_grader
    from math_verify import parse, verify

    from pasodoble.grader import shortcuts, sll
    from pasodoble.grader.worker import wrap

    golds = [  # the one whose solve runs past 5 s would dominate every column alike
        g for g in gold_answers(data_dir(), "minerva_math")[:per_set] if "=" in g and "\\ddot" not in g
    ]
    pairs = [(g, a) for g in golds for a, ok in variants(g, extra_wrong=3) if not ok]
    sll.install()
    parsed = [(parse(wrap(g)), parse(wrap(a))) for g, a in pairs]
    seconds: dict[str, list[float]] = {}
    verdicts: dict[str, list[bool]] = {}
    for _ in range(repeats):
        for mode in ("plain", "disproof", "disproof + memo"):
            shortcuts.uninstall()  # also empties the memo
            if mode != "plain":
                shortcuts.install()
            if mode == "disproof":
                math_verify_grader.solve = shortcuts._ORIGINAL_SOLVE
            start = time.perf_counter()
            verdicts[mode] = [verify(list(g), list(a), timeout_seconds=None) for g, a in parsed]
            seconds.setdefault(mode, []).append(time.perf_counter() - start)
    shortcuts.uninstall()
    sll.uninstall()
    print(f"worker shortcuts on {len(golds)} minerva equation golds x 4 wrong answers (median of {repeats}):")
    for mode, runs in seconds.items():
        same = verdicts[mode] == verdicts["plain"]
        print(f"  {mode:<18}{statistics.median(runs):>8.2f} s   same verdicts as plain: {same}")
    # The gold left out above: math-verify's verdict against its near miss comes from SymPy's solve (no limit here).
    slow = next(g for g in gold_answers(data_dir(), "minerva_math") if "\\ddot" in g and "=" in g)
    for label, text in (("gold", slow), ("near miss", _bump_digit(slow))):
        equation = parse(wrap(text))[0]
        start = time.perf_counter()
        math_verify_grader.solve(equation, equation.free_symbols)
        print(f"  solve({label} {text[:40]!r}...): {time.perf_counter() - start:.2f} s")


def _row(name: str, pairs: int, mv_s: float, cold_s: float, warm_s: float) -> str:
    return f"{name:<16}{pairs:>7}{mv_s:>10.2f}{cold_s:>10.2f}{warm_s:>10.3f}{mv_s / cold_s:>8.1f}{mv_s / warm_s:>8.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-set", type=int, default=150, help="golds taken from each benchmark")
    parser.add_argument("--warmup-per-set", type=int, default=10, help="other golds graded before timing")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated benchmark names")
    parser.add_argument("--repeats", type=int, default=3, help="timings are the median of this many runs")
    parser.add_argument(
        "--extra-wrong", type=int, default=0, help="more wrong answers per gold (gold+1, gold+2, ...)"
    )
    parser.add_argument(
        "--shortcuts",
        action="store_true",
        help="only time the workers' shortcuts on minerva's equation golds",
    )
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("pasodoble.grader").setLevel(logging.ERROR)
    if args.shortcuts:
        time_shortcuts(args.per_set, args.repeats)
        return 0
    sets = tuple(args.sets.split(","))
    golds, responses = build_mix(args.per_set, sets=sets, extra_wrong=args.extra_wrong)
    mix, begin = {}, 0
    for name in sets:  # the same pairs as one mix, timed set by set
        end = begin + len(build_mix(args.per_set, sets=(name,), extra_wrong=args.extra_wrong)[0])
        mix[name], begin = (golds[begin:end], responses[begin:end]), end
    # Warm-up pairs from other golds: both sides start timing with a warm parser, none of the timed pairs cached.
    warmup = build_mix(args.warmup_per_set, skip=args.per_set, sets=sets)
    for gold in WARMUP_GOLDS:  # also when --per-set leaves no other golds in the files
        for answer, _ in variants(gold):
            warmup[0].append(gold)
            warmup[1].append(TEMPLATES[len(warmup[1]) % len(TEMPLATES)].format(steps=STEPS, answer=answer))
    print(f"pairs: {len(golds)} ({len(set(golds))} distinct golds), cores: {sorted(os.sched_getaffinity(0))}")

    mv, expected, mv_cpu, mv_per_pair = time_math_verify(mix, warmup, args.repeats)
    cold, warm, got, counters, cold_cpu = time_grader(mix, warmup, args.repeats)

    med = {
        key: {name: statistics.median(runs) for name, runs in table.items()}
        for key, table in (("mv", mv), ("cold", cold), ("warm", warm))
    }
    print(f"{'set':<16}{'pairs':>7}{'mv s':>10}{'cold s':>10}{'warm s':>10}{'cold x':>8}{'warm x':>8}")
    for name in sets:
        print(_row(name, len(mix[name][0]), med["mv"][name], med["cold"][name], med["warm"][name]))
    totals = {key: sum(values.values()) for key, values in med.items()}
    print(_row("all", len(golds), totals["mv"], totals["cold"], totals["warm"]))
    print(
        f"CPU seconds (median run): math-verify {mv_cpu:.2f}, grader cold {cold_cpu:.2f} "
        f"(parent + worker), ratio {mv_cpu / cold_cpu:.1f}"
    )
    routed_s, routed_cpu = time_routed_math_verify(mix, warmup, args.repeats)
    print(
        f"math-verify on only the pairs the grader routes to it: {routed_s:.2f} s wall, {routed_cpu:.2f} s CPU "
        f"(ceiling of a grader handing those to plain math-verify: {totals['mv'] / routed_s:.1f}x wall, "
        f"{mv_cpu / routed_cpu:.1f}x CPU)"
    )
    answers, distinct, first_s, again_s = time_parse_floor(mix, warmup, args.repeats)
    print(
        f"parsing alone (the workers' parser) of those {answers} answers and their {distinct} golds: "
        f"{first_s:.2f} s CPU, {again_s:.2f} s parsing the same strings again (floor of any grader that decides "
        f"them from math-verify's parse: {mv_cpu / first_s:.1f}x, {mv_cpu / again_s:.1f}x with a parser warm on "
        "these very strings)"
    )
    print(f"cold counters (sum over sets, last run): {dict(counters)}")
    print(
        "where math-verify's time goes (its last timed pass; kind of the gold answer / who decides in the grader):"
    )
    print(f"  {'kind / decided by':<26}{'pairs':>7}{'mv s':>9}{'share':>8}{'>4.5 s':>8}")
    for label, n, spent, slow, share in time_by_kind(mix, mv_per_pair):
        print(f"  {label:<26}{n:>7}{spent:>9.2f}{100 * share:>7.1f}%{slow:>8}")

    print(f"math-verify correct: {sum(sum(v) for v in expected.values())}/{len(golds)}")
    failed = {}
    for label, reference in (
        ("on the whole responses", expected),
        ("on the extracted answers (what the grader computes)", answer_verdicts(mix)),
    ):
        failed[label] = disagreements(reference, got)
        agreement = 100.0 * (len(golds) - len(failed[label])) / len(golds)
        print(f"agreement with math-verify {label}: {agreement:.2f}% ({len(failed[label])} disagreements)")
        for name, i in failed[label]:
            answer = extract_answer(mix[name][1][i])[0]
            print(
                f"  {name}: gold={mix[name][0][i]!r} answer={answer!r} math-verify={reference[name][i]} "
                f"grader={got[name][i]}"
            )
    return 1 if any(failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
