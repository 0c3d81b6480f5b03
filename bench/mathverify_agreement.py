"""Agreement with math-verify's published test expectations, through `verify-answers` and the eval's grading path.

math-verify's own test suite is the specification of how answers are read. This script reads the test files of a
math-verify checkout without running them (`ast.literal_eval` of every `pytest.mark.parametrize` table whose first
three names are gold, pred, expected; tables built by code are counted and skipped), turns each case into a
{gold, pred, expected} line, and grades the lines three ways:

- `verify-answers`: the command itself on a JSONL file, default flags (`pred` is the whole text);
- `eval`: golds read by the eval loader (`parse_answers`), responses graded by a `Grader` configured as
  `pasodoble eval` configures it by default;
- math-verify: `verify(parse(gold), parse(pred))` with its defaults (the installed version).

It prints the agreement counts and every case where a route differs from the expectation, with the answer each
route read. Expectations that use non-default settings (another precision, `allow_set_relation_comp=True`) are kept
as written, so no route can meet all of them.

    python bench/mathverify_agreement.py PATH/TO/Math-Verify/tests        # a few minutes on one core
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tempfile
from pathlib import Path

from math_verify import parse, verify

from pasodoble.evals.cli import eval_grader_config
from pasodoble.evals.problems import parse_answers
from pasodoble.grader import Grader
from pasodoble.grader.cli import main as verify_answers_main

_NAMES = ("gold", "pred", "expected")


def _argnames(node: ast.expr) -> list[str] | None:
    try:
        names = ast.literal_eval(node)
    except ValueError:
        return None
    if isinstance(names, str):
        names = names.split(",")
    return [str(name).strip() for name in names]


def load_cases(tests: Path) -> tuple[list[dict], int]:
    """({gold, pred, expected, where} per case, tables skipped because they are built by code)."""
    cases, skipped = [], 0
    for path in sorted(tests.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if not (
                    isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"
                ):
                    continue
                names = _argnames(decorator.args[0])
                if not names or tuple(names[:3]) != _NAMES:
                    continue
                try:
                    rows = ast.literal_eval(decorator.args[1])
                except ValueError:
                    skipped += 1
                    continue
                for index, row in enumerate(rows):
                    where = f"{path.name}::{node.name}[{index}]"
                    cases.append({"gold": row[0], "pred": row[1], "expected": bool(row[2]), "where": where})
    return cases, skipped


def verify_answers_verdicts(cases: list[dict]) -> list[tuple[bool, str | None]]:
    """(correct, extracted) per case from `pasodoble verify-answers` with default flags."""
    with tempfile.TemporaryDirectory() as folder:
        source, out = Path(folder) / "pairs.jsonl", Path(folder) / "verdicts.jsonl"
        lines = (json.dumps({"gold": c["gold"], "pred": c["pred"]}) + "\n" for c in cases)
        source.write_text("".join(lines), encoding="utf-8")
        if verify_answers_main([str(source), "--out", str(out), "--no-progress"]) != 0:
            raise SystemExit("verify-answers failed")
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return [(row["correct"], row["extracted"]) for row in rows]


def eval_verdicts(cases: list[dict]) -> list[tuple[bool, str | None]]:
    """(correct, extracted) per case as `pasodoble eval` grades a response against its loaded gold(s)."""
    results = []
    with Grader(eval_grader_config()) as grader:
        for case in cases:
            golds = parse_answers(case["gold"]) or ("",)
            verdicts = grader.grade(list(golds), [case["pred"]] * len(golds), extract=True).verdicts
            best = next((v for v in verdicts if v.correct), verdicts[0])
            results.append((best.correct, best.extracted))
    return results


def math_verify_verdicts(cases: list[dict]) -> list[tuple[bool, str | None]]:
    results = []
    for case in cases:
        predicted = parse(case["pred"])
        results.append(
            (bool(verify(parse(case["gold"]), predicted)), str(predicted[-1]) if predicted else None)
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", type=Path, help="the tests/ folder of a math-verify checkout")
    args = parser.parse_args(argv)
    cases, skipped = load_cases(args.tests)
    if not cases:
        raise SystemExit(
            f"{args.tests}: no (gold, pred, expected) tables found; pass math-verify's tests/ folder"
        )
    routes = {
        "verify-answers": verify_answers_verdicts(cases),
        "eval": eval_verdicts(cases),
        "math-verify": math_verify_verdicts(cases),
    }
    print(f"{len(cases)} cases ({skipped} tables built by code skipped)")
    for name, verdicts in routes.items():
        agree = sum(correct == case["expected"] for case, (correct, _) in zip(cases, verdicts, strict=True))
        print(f"{name:>15}: {agree} of {len(cases)} agree with the expectation")
    for name, verdicts in routes.items():
        print(f"\n{name} disagreements:")
        for case, (correct, extracted) in zip(cases, verdicts, strict=True):
            if correct != case["expected"]:
                print(
                    f"  {case['where']}: expected {case['expected']}, got {correct}; gold {case['gold']!r}, "
                    f"pred {case['pred'][:160]!r}, read {extracted!r}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
