"""Gold answers and predictions as people write them (`goldforms.py`, the "auto" fallback of `extract.py`).

Each pair in `NOW_RIGHT` was graded wrong (or found no answer) before golds and answers were normalised: math-verify
reads `\\boxed{Answer: 7}` as letters over 7 and `\\boxed{45°}` as nothing. Wrong answers stay wrong, the
normalisation is counted per batch, and `verify-answers` reads bare answers without flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pasodoble.grader import Grader, GraderConfig
from pasodoble.grader.extract import extract_answer
from pasodoble.grader.goldforms import normalise_answer

ROOT = Path(__file__).resolve().parents[2]

# (gold, response): each graded correct now, wrong or no_answer on the old code (default settings, extraction on).
NOW_RIGHT = [
    ("Answer: 7", "\\boxed{7}"),
    ("The answer is 7", "\\boxed{7}"),
    ("Final answer: \\frac{1}{2}", "\\boxed{0.5}"),
    ("7.", "\\boxed{7}"),
    ("45°", "\\boxed{45}"),
    ("45 °C", "\\boxed{45}"),
    ("€5", "\\boxed{5}"),
    ("3.50 dollars", "\\boxed{3.5}"),
    ("12", "\\boxed{12 dollars.}"),
    ("12 cm", "12 cm"),  # a bare answer: no box, no flag
    ("1,234", "1234"),
    ("\\$3.50", "$3.50"),
    ("5 apples", "The answer is 5."),
    ("\\frac{1}{2}", "So the answer is $\\frac{1}{2}$ of the cake."),
    ("7", "Answer: \\(7\\)"),
    ("x^2+1", "x^2 + 1"),
]
# Pairs that must stay wrong.
STAY_WRONG = [
    ("12 cm", "13"),
    ("1,234", "1234.5"),
    ("5 apples", "\\boxed{6}"),
    ("1,234", "1.234"),  # a comma followed by three digits separates thousands, whatever the other side says
    ("Answer: 7", "\\boxed{8}"),
    ("45°", "I think it is 46 degrees"),
    ("3 \\pi", "3"),
]


@pytest.fixture(scope="module")
def grader():
    with Grader(GraderConfig(fallback="auto", num_workers=1)) as g:
        yield g


@pytest.mark.parametrize(("gold", "response"), NOW_RIGHT)
def test_answers_as_people_write_them_are_graded_right(grader, gold, response):
    verdict = grader.grade([gold], [response]).verdicts[0]
    assert (verdict.correct, verdict.status) == (True, "ok"), verdict


@pytest.mark.parametrize(("gold", "response"), STAY_WRONG)
def test_wrong_answers_stay_wrong(grader, gold, response):
    assert not grader.grade([gold], [response]).verdicts[0].correct


def test_decimal_comma_only_when_asked():
    assert normalise_answer("3,5") == ("3,5", ())
    assert normalise_answer("3,5", decimal_comma=True) == ("3.5", ("decimal_comma",))
    assert normalise_answer("1,234", decimal_comma=True) == ("1234", ("thousands",))
    with Grader(GraderConfig(decimal_comma=True)) as g:
        assert g.grade(["3,5"], ["\\boxed{3.5}"]).verdicts[0].correct


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: $1,234$ apples.", ("1234", ("answer_prefix", "delimiters"))),
        ("3 pi", ("3 pi", ())),
        ("5 x", ("5 x", ())),
        ("-US$12", ("-12", ("currency",))),
        ("\\[ \\frac{1}{2} \\]", ("\\frac{1}{2}", ("delimiters",))),
    ],
)
def test_normalise_answer_kinds(text, expected):
    assert normalise_answer(text)[0] == expected[0]
    assert set(expected[1]) <= set(normalise_answer(text)[1])


def test_auto_fallback_reads_phrases_bare_answers_and_the_last_number():
    assert extract_answer("The answer is $5$ apples.", "auto") == ("$5$", "answer_phrase")
    assert extract_answer("  \\frac{1}{2} ", "auto") == ("\\frac{1}{2}", "bare")
    assert extract_answer("I think it is 12", "auto") == ("12", "last_number")  # as math-verify reads it
    assert extract_answer("12\n13", "auto") == ("13", "last_number")
    assert extract_answer("I do not know", "auto") == (None, None)
    assert extract_answer("\\boxed{3} and the answer is 4", "auto") == ("3", "boxed")
    assert extract_answer("12 cm", "none") == (None, None)  # rewards keep the boxed format


def test_normalisation_is_counted_per_batch(grader):
    batch = grader.grade(["Answer: 7", "1,234", "5"], ["\\boxed{7}", "1,234", "The answer is 5"])
    assert [v.correct for v in batch.verdicts] == [True, True, True]
    counters = batch.counters
    assert counters["gold_normalised"] == 2
    assert counters["answer_normalised"] == 1
    assert counters["normalised_answer_prefix"] == 1
    assert counters["normalised_thousands"] == 2
    assert (counters["answer_phrases"], counters["bare_answers"]) == (1, 1)
    assert batch.verdicts[1].extracted == "1,234"  # the answer as found, not as normalised


def test_loader_strips_answer_phrases_and_delimiters():
    from pasodoble.evals.problems import parse_answers

    assert parse_answers("Answer: 7") == ("7",)
    assert parse_answers("\\(\\frac{1}{2}\\)") == ("\\frac{1}{2}",)
    assert parse_answers("\\[x^2\\]") == ("x^2",)
    assert parse_answers("12 cm") == ("12 cm",)  # units are the grader's, which counts them


def test_verify_answers_reads_bare_answers_without_flags(tmp_path):
    rows = [
        {"gold": "12 cm", "pred": "12"},
        {"gold": "1,234", "pred": "1234"},
        {"gold": "Answer: 7", "pred": "7"},
        {"gold": "5", "pred": "6"},
        {"gold": "5", "pred": "I do not know"},
    ]
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pasodoble",
            "verify-answers",
            str(source),
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["correct"] for row in graded] == [True, True, True, False, False]
    assert [row["status"] for row in graded] == ["ok", "ok", "ok", "ok", "no_answer"]
    assert "5 graded, 3 correct" in done.stderr
    assert (
        "normalised 3 gold(s) and 0 answer(s) (answer_prefix 1, units 1, thousands 1); "
        "answers found after 'answer is' 0, bare answers 4" in done.stderr
    )


def test_benchmark_golds_keep_their_math_verify_value(data_dir):
    """Each shipped benchmark gold that normalisation changes means the same to math-verify before and after."""
    from math_verify import parse, verify

    from pasodoble.evals.benchmarks import BENCHMARKS, load_benchmark

    golds = {a for name in BENCHMARKS for p in load_benchmark(name, data_dir) for a in p.answers}
    changed = sorted((gold, new) for gold in golds if (new := normalise_answer(gold)[0]) != gold.strip())
    assert changed  # `\$18.90`, `58,500`, ...
    for gold, new in changed:
        assert verify(parse(f"\\boxed{{{gold}}}"), parse(f"\\boxed{{{new}}}")), (gold, new)
