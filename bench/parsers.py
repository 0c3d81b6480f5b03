"""Benchmark: worst-case time per call of every parser that reads model text, on adversarial inputs of 1 KB to 1 MB.

The parsers run outside any time limit (in training, evaluation and `verify-answers`), so each must be linear in
the length of its input. For every parser and every input shape (unclosed tags, thousands of openers, `\\boxed{`
repeated, braces nested 100k deep, a leak test on two long token runs, ...) this prints the slowest of `--repeats`
calls, in CPU seconds (`time.process_time`, so other load on the machine barely moves it), at 1 KB, 16 KB, 256 KB
and 1 MB, and the growth from 64 KB to 1 MB (a linear parser grows about 16x; a quadratic one 256x). Parsers:
`extract_answer` (boxed, `<answer>`, `####`, last-number fallback; `extract_auto` with the prose reading of
`prose.py`, `extract_auto_set` also reading several boxes as one answer; `gold_reading`: a gold's box group, set size
and normal form), `parse_proposal` (its `max_chars` cap lifted,
so the parsing itself is timed) and the fast path (`fast_verdict`, same text and one character apart, which covers
its normaliser). A last column divides that growth by the growth of a reference linear scan of the same two texts,
timed interleaved with it (about 1 for a linear parser, 16 for a quadratic one), meant to cancel what makes every
byte of a large text dearer on a given machine (a 41x growth seen once in CI for a parser that gives 9-20x
elsewhere could not be reproduced to check that it does). The exit status is 1 if any growth is 40x or more and 2.5x or more that
of the scan. `tests/grader/test_parsers_linear.py` runs the 64 KB -> 1 MB growth of the same shapes.

    python bench/parsers.py                      # about a minute; --repeats 3 --sizes 1024 1048576
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from collections.abc import Callable

from pasodoble.core.prompts import parse_proposal
from pasodoble.grader.extract import extract_answer, extract_box_group
from pasodoble.grader.fastpath import fast_verdict
from pasodoble.grader.goldforms import normalise_answer, set_size

SIZES = (1024, 16 * 1024, 256 * 1024, 1024 * 1024)
GROWTH_FROM, GROWTH_TO = 64 * 1024, 1024 * 1024
MAX_GROWTH = 40.0  # for 16x the size; linear is about 16, quadratic 256
MAX_RELATIVE_GROWTH = MAX_GROWTH / 16  # the same bound against a reference linear scan (`relative_growth`)
# The reference: a pattern that matches none of the shapes, so the regex engine tests every character against a set
# (as a parser's scan for a number or a tag does); REFERENCE_CALLS calls make each timing about a millisecond or more.
_REFERENCE = re.compile(r"[\x00\x01]\x02")
REFERENCE_CALLS = 8


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    count = max(1, (size - len(head) - len(tail)) // len(unit))
    return head + unit * count + tail


def _nested(size: int, head: str = "", tail: str = "") -> str:
    depth = max(1, (size - len(head) - len(tail)) // 2)
    return head + "{" * depth + "1" + "}" * depth + tail


# Each shape makes a text of about `size` characters from the size.
SHAPES: dict[str, Callable[[int], str]] = {
    "unclosed_answer": lambda n: _fill("x", n, head="<answer>"),
    "many_answer_openers": lambda n: _fill("<answer>", n),
    "answer_openers_closed": lambda n: _fill("<answer>", n, tail="</answer>"),
    "many_boxed_openers": lambda n: _fill("\\boxed{", n),
    "many_open_braces": lambda n: _fill("{", n, head="\\boxed"),
    "nested_braces": lambda n: _nested(n, head="\\boxed"),
    "escaped_braces": lambda n: _fill("\\{", n, head="\\boxed{"),
    "boxed_spaces": lambda n: _fill(" ", n, head="\\boxed"),
    "many_gsm8k_markers": lambda n: _fill("#", n),
    "gsm8k_lines": lambda n: _fill("#### 1\n", n),
    "digits": lambda n: _fill("7", n),
    "number_spaces": lambda n: _fill("1 ", n),
    "thousands_groups": lambda n: _fill(",000", n, head="1"),
    "answer_phrases": lambda n: _fill("answer is ", n),
    "answer_phrase_spaces": lambda n: _fill(" ", n, head="answer"),
    "answer_phrase_dollar": lambda n: _fill("x", n, head="The answer is $"),
    "unclosed_problem": lambda n: _fill("x", n, head="<problem>"),
    "many_problem_openers": lambda n: _fill("<problem>", n),
    "problem_then_answer_openers": lambda n: _fill("<answer>", n, head="<problem>q</problem>"),
    "nested_in_answer": lambda n: _nested(n, head="<problem>q</problem><answer>\\boxed", tail="</answer>"),
    "leak_test": lambda n: (
        "<problem>" + "1 " * (n // 3) + "</problem><answer>\\boxed{" + "1 " * (n // 6) + "2}</answer>"
    ),
    "unclosed_think": lambda n: _fill("x", n, head="<think>"),
    "frac_spaces": lambda n: _fill("\\frac ", n),
    # the prose reading of `fallback="auto"` (`prose.py`) and several boxes read as one answer
    "many_dollars": lambda n: _fill("$", n),
    "dollar_spans": lambda n: _fill("$x$, ", n),
    "cut_inline_spans": lambda n: _fill("$ x\n", n),
    "unclosed_display": lambda n: _fill("x ", n, head="\\["),
    "final_answers": lambda n: _fill("final answer ", n),
    "final_answer_is": lambda n: _fill("Final answer is $1$. ", n, tail="I hope"),
    "answer_words_spans": lambda n: _fill("answer $1$ ", n),
    "box_groups": lambda n: _fill("\\boxed{1}, ", n),
    "spaced_numbers": lambda n: _fill("1 000,5 ", n),
}


def _gold_reading(text: str) -> object:
    """What the grader does to a gold under `fallback="auto"`: its box group, its set size, its normal form."""
    gold = extract_box_group(text) or text
    return set_size(gold), normalise_answer(gold, extended=True)


def _fast_path_same(text: str) -> object:
    return fast_verdict(text, text)


def _fast_path_near(text: str) -> object:
    return fast_verdict(text, _one_character_apart(text))


@functools.lru_cache(maxsize=2)
def _one_character_apart(text: str) -> str:
    # Built once per text, so the best of a few calls times the fast path alone: two fresh megabyte copies cost
    # more than the fast path does (about 1 ms of page faults against 7 us at 64 KB, measured), and only above
    # the allocator's mmap threshold, which made this cell grow 110-140x from 64 KB to 1 MB.
    return text[:-1] + "9"


PARSERS: dict[str, Callable[[str], object]] = {
    "extract_answer": lambda text: extract_answer(text, "last_number"),
    "extract_auto": lambda text: extract_answer(text, "auto"),
    "extract_auto_set": lambda text: extract_answer(text, "auto", set_size=4),
    "gold_reading": lambda text: _gold_reading(text),
    "parse_proposal": lambda text: parse_proposal(text, max_chars=len(text) + 1),
    "fast_path_same": _fast_path_same,
    "fast_path_near": _fast_path_near,
}


def worst_cpu_s(parser: Callable[[str], object], text: str, repeats: int) -> float:
    """The slowest of `repeats` calls, in CPU seconds."""
    worst = 0.0
    for _ in range(repeats):
        start = time.process_time()
        parser(text)
        worst = max(worst, time.process_time() - start)
    return worst


def best_cpu_s(parser: Callable[[str], object], text: str, repeats: int) -> float:
    """The fastest of `repeats` calls, in CPU seconds (what a growth test compares: the least disturbed run)."""
    return min(_one_cpu_s(parser, text) for _ in range(repeats))


def _one_cpu_s(parser: Callable[[str], object], text: str) -> float:
    start = time.process_time()
    parser(text)
    return time.process_time() - start


def growth(parser: Callable[[str], object], shape: Callable[[int], str], repeats: int) -> float:
    """CPU time at 1 MB over CPU time at 64 KB (best of `repeats` each)."""
    small = best_cpu_s(parser, shape(GROWTH_FROM), repeats)
    large = best_cpu_s(parser, shape(GROWTH_TO), repeats)
    return large / max(small, 1e-5)


def _reference_scan(text: str) -> None:
    for _ in range(REFERENCE_CALLS):
        _REFERENCE.search(text)


def relative_growth(parser: Callable[[str], object], shape: Callable[[int], str], repeats: int) -> float:
    """The parser's growth from 64 KB to 1 MB over that of a reference linear scan of the same two texts.

    The four timings (parser and reference, small and large) are interleaved and each is the best of `repeats`,
    so what makes every byte of the 1 MB text dearer on a given machine at a given moment (its caches, a busy
    neighbour on the same core) should reach both and cancel: a linear parser gives about 1, a quadratic one 16.
    """
    small, large = shape(GROWTH_FROM), shape(GROWTH_TO)
    cells = (
        (parser, small),
        (_reference_scan, small),
        (parser, large),
        (_reference_scan, large),
    )
    best = [float("inf")] * len(cells)
    for _ in range(repeats):
        best = [
            min(seconds, _one_cpu_s(call, text)) for seconds, (call, text) in zip(best, cells, strict=True)
        ]
    parser_small, reference_small, parser_large, reference_large = (max(seconds, 1e-5) for seconds in best)
    return (parser_large / parser_small) / (reference_large / reference_small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="calls per cell (default: %(default)s)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="input sizes in characters")
    args = parser.parse_args(argv)
    sizes = args.sizes
    header = (
        f"{'parser':16} {'shape':28} "
        + " ".join(f"{_label(n):>9}" for n in sizes)
        + f" {'64K->1M':>8} {'vs scan':>8}"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for parser_name, parse in PARSERS.items():
        for shape_name, shape in SHAPES.items():
            cells = [worst_cpu_s(parse, shape(n), args.repeats) for n in sizes]
            ratio = growth(parse, shape, args.repeats)
            relative = relative_growth(parse, shape, args.repeats)
            failed |= ratio >= MAX_GROWTH and relative >= MAX_RELATIVE_GROWTH
            row = " ".join(f"{seconds * 1e3:8.2f}m" for seconds in cells)
            print(f"{parser_name:16} {shape_name:28} {row} {ratio:7.1f}x {relative:7.2f}x", flush=True)
    print(
        "cells: worst CPU milliseconds per call; then the growth from 64 KB to 1 MB (linear ~16x) and that growth"
        " over a linear scan's (linear ~1x)"
    )
    return 1 if failed else 0


def _label(size: int) -> str:
    return f"{size // 1024 // 1024} MB" if size >= 1024 * 1024 else f"{size // 1024} KB"


if __name__ == "__main__":
    sys.exit(main())
