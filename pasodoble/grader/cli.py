"""`pasodoble verify-answers IN.jsonl --out OUT.jsonl`: grade (gold, pred) pairs from a file.

Each input line is a JSON object with `gold` (an answer string; a JSON number is accepted) and `pred` (a whole model
response, or an extracted answer with `--no-extract`). Each output line is the input object plus `correct` (bool),
`extracted` (the answer found in `pred`, or null) and `status` (ok / no_answer / timeout / error). Bad lines (not
UTF-8, not JSON, a lone surrogate, a missing or mistyped field, a gold that is NaN or overflows, such as `1e400`)
are reported on stderr with their line numbers and skipped, before any grading; one summary line with the count
goes to stderr at the end. The output is standard JSON (`pasodoble.jsonl.dumps_strict`: a non-finite number in
another field is written as null), written to a temporary file and renamed, which is removed if the write fails.

Run: `pasodoble verify-answers answers.jsonl --out graded.jsonl --num-workers 2` (a progress bar counts graded lines;
`--no-progress` turns it off). Without flags a response with no `\\boxed{}`, `<answer>` or `####` is read by the
"auto" fallback (`extract.py`, `prose.py`: the answer as math-verify's extraction reads it: `final answer`
and `answer` phrases, the response itself when it is a short math expression, the last LaTeX span or number, and
several boxes as one answer for a gold listing as many items), so a file of bare answers needs no `--no-extract`; golds and answers written as people
write them (`Answer: 7`, `$7$`, `12 cm`, `1,234`, `\\$3.50`; `goldforms.py`) are normalised, and the summary says
how many golds and answers were, of which kind (`--decimal-comma` reads `3,5` as 3.5). When answers are not found, the summary says how to read bare answers
(`--no-extract`) or responses that end in a plain number (`--fallback last_number`); when math-verify could read
an answer or gold only in part (see `worker.py`), it says how many.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from pasodoble.errors import UserError
from pasodoble.grader.extract import FALLBACKS
from pasodoble.grader.goldforms import KINDS
from pasodoble.grader.grader import PARTIAL_PARSES, Grader, GraderConfig
from pasodoble.io import write_text_atomic
from pasodoble.jsonl import dumps_strict, read_jsonl_skipping
from pasodoble.progress import progress_bar

_CHUNK = 2048  # lines graded per batch: bounds memory while keeping workers busy


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `verify-answers` command to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "verify-answers",
        help="grade gold/pred pairs from a JSONL file",
        description="Grade (gold, pred) pairs: each output line is the input object plus `correct`, `extracted` "
        "and `status` (ok / no_answer / timeout / error). Bad input lines are reported and skipped.",
    )
    parser.add_argument("input", type=Path, help="JSONL file, one {'gold': ..., 'pred': ...} per line")
    parser.add_argument("--out", type=Path, required=True, help="output JSONL (input fields + verdict)")
    parser.add_argument(
        "--no-extract",
        action="store_true",
        help="pred is already an answer (else the answer is taken from the last \\boxed{}, <answer> or ####)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=GraderConfig.timeout_s,
        help="wall-clock limit per check, seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=GraderConfig.num_workers,
        help="grader worker processes (default: %(default)s)",
    )
    parser.add_argument(
        "--fallback",
        choices=FALLBACKS,
        default="auto",
        help="when a response has no marked answer: auto (read it as math-verify does: 'final answer' and 'answer' "
        "phrases, a short bare answer, the last LaTeX span or number; also several boxes as one answer for a gold "
        "listing as many items; the default), none (status no_answer) or its last plain number",
    )
    parser.add_argument(
        "--decimal-comma",
        action="store_true",
        help="read a comma not followed by exactly three digits as a decimal point (3,5 -> 3.5); "
        "by default 3,5 is the set {3, 5} and 1,234 is 1234",
    )
    parser.add_argument(
        "--partial-parses",
        choices=PARTIAL_PARSES,
        default=GraderConfig.partial_parses,
        help="a pair whose gold or answer math-verify reads only in part (its whole \\boxed{} does not parse): "
        "keep math-verify's verdict (the default) or reject it (graded wrong)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_verify_answers)
    return parser


def _read_rows(path: Path) -> tuple[list[dict], list[str]]:
    """Valid rows and one message per bad line (bytes, JSON, Unicode and types are checked: `pasodoble.jsonl`)."""
    if not path.is_file():
        raise UserError(f"{path}: no such file; pass a JSONL file with 'gold' and 'pred' fields")
    return read_jsonl_skipping(path, _row_problem)


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "expected a JSON object"
    gold = row.get("gold")
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        return "'gold' must be a string or a number"
    if isinstance(gold, float) and not math.isfinite(gold):
        return (
            "'gold' is NaN, an infinity or a number past 1.8e308; write a huge number as a string (\"1e400\")"
        )
    if not isinstance(row.get("pred"), str):
        return "'pred' must be a string"
    return None


def run_verify_answers(args: argparse.Namespace) -> int:
    """Grade the file; 0 on success (bad lines are skipped, not fatal)."""
    config = GraderConfig(
        timeout_s=args.timeout_s,
        num_workers=args.num_workers,
        fallback=args.fallback,
        partial_parses=args.partial_parses,
        decimal_comma=args.decimal_comma,
    )
    config.validate()
    if args.out.is_dir():
        raise UserError(f"--out {args.out} is a folder; give the path of the output JSONL file")
    rows, problems = _read_rows(args.input)
    for problem in problems:
        print(problem, file=sys.stderr)
    totals: dict[str, int] = {}
    bar = progress_bar(total=len(rows), unit="line", desc="verify-answers", disable=args.no_progress or None)
    with Grader(config) as grader, bar:
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK]
            batch = grader.grade(
                [str(r["gold"]) for r in chunk], [r["pred"] for r in chunk], extract=not args.no_extract
            )
            for row, verdict in zip(chunk, batch.verdicts, strict=True):
                row.update(correct=verdict.correct, extracted=verdict.extracted, status=verdict.status)
            for name, value in batch.counters.items():
                totals[name] = totals.get(name, 0) + value
            bar.update(len(chunk))
    try:
        write_text_atomic(args.out, "".join(dumps_strict(row) + "\n" for row in rows))
    except OSError as err:  # the temporary file is already removed; say why the write failed
        raise UserError(
            f"--out {args.out}: cannot write ({err.strerror or err}); nothing was written"
        ) from None
    correct = sum(row["correct"] for row in rows)
    print(
        f"verify-answers: {len(rows)} graded, {correct} correct ({correct / max(len(rows), 1):.1%}), "
        f"no_answer {totals.get('no_answer', 0)}, timeouts {totals.get('timeouts', 0)}, "
        f"errors {totals.get('errors', 0)}, bad lines skipped {len(problems)} -> {args.out}",
        file=sys.stderr,
    )
    if any(
        totals.get(name, 0)
        for name in (
            "gold_normalised",
            "answer_normalised",
            "answer_phrases",
            "bare_answers",
            "latex_spans",
            "last_numbers",
            "box_groups",
        )
    ):
        print(_normalised_summary(totals), file=sys.stderr)
    partial, gold_partial = totals.get("partial_parses", 0), totals.get("gold_partial_parses", 0)
    if partial or gold_partial:
        outcome = (
            "so those pairs were graded wrong unless the answer is the gold itself (--partial-parses reject)"
            if args.partial_parses == "reject"
            else "those verdicts rest on that piece (--partial-parses reject grades them wrong)"
        )
        print(
            f"verify-answers: math-verify read {partial} answer(s) and {gold_partial} gold answer(s) only in part "
            f"(the whole \\boxed{{}} did not parse, so it took the value of a piece of it); {outcome}",
            file=sys.stderr,
        )
    if totals.get("no_answer", 0) and not args.no_extract and args.fallback != "last_number":
        print(
            "verify-answers: no answer was found in some responses (no \\boxed{}, <answer>, ####, answer phrase, "
            "LaTeX span, number or short bare answer); if 'pred' holds bare answers pass --no-extract, if responses end in a plain "
            "number pass --fallback last_number",
            file=sys.stderr,
        )
    return 0


def _normalised_summary(totals: dict[str, int]) -> str:
    """One line: how many golds and answers were normalised, by kind, and how many answers the fallbacks found."""
    kinds = ", ".join(
        f"{kind} {totals[f'normalised_{kind}']}" for kind in KINDS if totals.get(f"normalised_{kind}", 0)
    )
    return (
        f"verify-answers: normalised {totals.get('gold_normalised', 0)} gold(s) and "
        f"{totals.get('answer_normalised', 0)} answer(s) ({kinds or 'none'}); "
        f"answers found after 'answer is' {totals.get('answer_phrases', 0)}, "
        f"bare answers {totals.get('bare_answers', 0)}, in LaTeX spans {totals.get('latex_spans', 0)}, "
        f"last numbers {totals.get('last_numbers', 0)}, several boxes as one {totals.get('box_groups', 0)}"
    )


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry: `python -m pasodoble.grader.cli IN.jsonl --out OUT.jsonl`."""
    parser = argparse.ArgumentParser(prog="pasodoble")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["verify-answers", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
