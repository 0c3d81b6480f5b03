"""Answers read as math-verify reads them under `fallback="auto"` (`prose.py`, `extract_boxes`, extended forms).

One group of cases per family of the reading: prose without a box, several boxes for a gold that lists as many
items, relation spellings and `\\text{}`, numbers with space separators or decimal commas in context, units in other
forms. Each pair is checked through a real grader (math-verify in its worker), and the training default
(`fallback="none"`) is checked to read exactly as before.
"""

from __future__ import annotations

import pytest

from pasodoble.grader import Grader, GraderConfig
from pasodoble.grader.extract import extract_answer, extract_box_group, extract_boxes
from pasodoble.grader.goldforms import normalise_answer, read_decimal_comma, set_size
from pasodoble.grader.prose import latex_spans, read_prose

# (gold, response, expected verdict) under fallback "auto"
PROSE = [
    ("24", "We get $x = 4$, so the perimeter is $24$.", True),
    ("120", "Final Answer: The number of ways is 120.", True),
    ("0.75", "Hence the answer: \\( \\frac{3}{4} \\)", True),
    ("\\sqrt{2}", "First \\boxed{3}. The final answer is $\\sqrt{2}$. I hope it is correct.", True),
    ("2, -3", "so the roots are $2$ and $-3$", True),
    ("12", "Thus\n\\[\n 12 \n\\]", True),
    ("7", "Answer $ \n 7 \n $", False),  # an inline span cut by line breaks is no answer
    (
        "\\begin{bmatrix}2&0\\\\0&2\\end{bmatrix}",
        "It is $\\begin{pmatrix} 2 & 0 \\\\ 0 & 2 \\end{pmatrix}$.",
        True,
    ),
    ("(2, 5]", "The solution set is $(2, 5]$.", True),
    ("(2, 5)", "The solution set is $(2, 5]$.", False),
    ("2/3", "so the chance that she wins is 2/3.", True),
]
BOXES = [
    ("-1, 3", "so $x = \\boxed{3}$ or $x = \\boxed{-1}$", True),
    ("(1, 0), (0, 1)", "\\boxed{(0, 1)} \\quad\\text{and}\\quad \\boxed{(1, 0)}", True),
    ("3", "so $x = \\boxed{3}$ or $x = \\boxed{-1}$", False),  # one item: the last box, as before
    ("1, 2", "\\boxed{1}\n\nLater, after more work: \\boxed{2}", False),  # a blank line: separate answers
    ("1, 2", "\\boxed{1} but never \\boxed{2}", False),  # words without a connector between the boxes
]
SPELLINGS = [
    ("y >= 3", "Therefore $y \\ge 3$.", True),
    ("y > 3", "Therefore $y \\geqslant 3$.", False),
    ("n != 4", "We need $n \\ne 4$.", True),
    ("a \\leq b", "$a <= b$", True),
    ("t < 1", "so $t \\lt 1$", True),
    ("\\text{even}", "The sum is $even$.", True),
    ("\\text{even}", "The sum is $odd$.", False),
]
NUMBERS = [
    ("25000", "The total is 25 000 dollars.", True),
    ("3.75", "It costs 3,75 € per kilo", True),
    ("1234", "1,234", True),
    ("1.234", "1,234", False),  # a comma before three digits separates thousands
    ("0.5", "0,5", True),  # the other side's decimal is the context
    ("2,5", "\\boxed{2.5}", True),
    ("0,125", "0.125", True),  # a comma after a leading zero cannot separate thousands
    ("2,5", "\\boxed{2.4}", False),
]
UNITS = [
    ("12\\text{ cm}", "\\boxed{12}", True),
    ("9 m^2", "\\boxed{9}", True),
    ("60 km/h", "\\boxed{60}", True),
    ("5\\,\\mathrm{kg}", "\\boxed{5}", True),
    ("14 m²", "\\boxed{14}", True),
    ("12\\text{ cm}", "\\boxed{13}", False),
    ("3 \\pi", "\\boxed{3}", False),  # pi is math, not a unit
]


@pytest.fixture(scope="module")
def auto_grader():
    with Grader(GraderConfig(fallback="auto", num_workers=1)) as grader:
        yield grader


@pytest.mark.parametrize(("gold", "response", "expected"), PROSE + BOXES + SPELLINGS + NUMBERS + UNITS)
def test_auto_reads_answers_as_math_verify_does(auto_grader, gold, response, expected):
    verdict = auto_grader.grade([gold], [response]).verdicts[0]
    assert verdict.correct is expected, verdict


def test_prose_sources():
    assert read_prose("Final Answer: The largest $n$ is 34.") == ("34", "answer_phrase")
    assert read_prose("Therefore $x \\geq 5$ is the solution.") == ("x \\geq 5", "latex_span")
    assert read_prose("which is 1,000.99€") == ("1,000.99", "last_number")
    assert read_prose("$1$, $2$ and $3$") == ("1, 2, 3", "latex_span")
    assert read_prose("costs $5\nthen 6 more") == ("6", "last_number")  # `$5` is a price, not a span
    assert read_prose("AZ2B") == (None, None)  # a digit inside a word is no number
    assert latex_spans("a \\$ b $x$ \\(y\\)") == [(7, 10, "x"), (11, 16, "y")]


def test_boxes_join_only_for_a_set_gold():
    text = "\\boxed{1}, \\boxed{2}"
    assert extract_answer(text, "auto", set_size=2) == ("1, 2", "boxes")
    assert extract_answer(text, "auto") == ("2", "boxed")
    assert extract_answer(text, "none", set_size=2) == ("2", "boxed")  # the strict rule of rewards
    assert extract_boxes(text, 3) is None
    assert extract_box_group("\\(\\boxed{1}\\) and \\(\\boxed{-2}\\).") == "1, -2"
    assert set_size("(1, 2), (2, 1)") == 2 and set_size("\\{1, 2, 3\\}") == 3 and set_size("[0, 1)") == 1


def test_eval_loader_reads_several_boxes_as_one_gold():
    from pasodoble.evals.problems import parse_answers

    assert parse_answers("so \\boxed{1} and \\boxed{2}") == ("1, 2",)
    assert parse_answers("\\boxed{W = 1") == ("\\boxed{W = 1",)  # never closed: read whole


def test_extended_forms_and_their_kinds():
    assert normalise_answer("1 000", extended=True) == ("1000", ("thousands",))
    assert normalise_answer("1\\,234.5", extended=True) == ("1234.5", ("thousands",))
    assert normalise_answer("x >= 5", extended=True) == ("x \\geq 5", ("relations",))
    assert normalise_answer("\\left( x \\right)", extended=True) == ("\\left( x \\right)", ())
    assert normalise_answer("12\\text{ cm}", extended=True) == ("12", ("units",))
    assert read_decimal_comma("1,22", "1.22") == "1.22"
    assert read_decimal_comma("1,234", "1.234") is None


def test_new_reading_is_counted_per_kind(auto_grader):
    batch = auto_grader.grade(
        ["25000", "x \\geq 5", "-1, 3", "7", "0.5"],
        ["It is 25 000.", "so $x >= 5$", "\\boxed{3}, \\boxed{-1}", "Answer: the value is $7$", "0,5"],
    )
    assert all(verdict.correct for verdict in batch.verdicts), batch.verdicts
    counters = batch.counters
    assert counters["last_numbers"] == 1 and counters["latex_spans"] == 1 and counters["box_groups"] == 1
    assert counters["answer_phrases"] == 1 and counters["bare_answers"] == 1
    assert counters["normalised_thousands"] == 1
    assert counters["normalised_relations"] == 2  # the gold's \geq and the answer's >=
    assert counters["normalised_decimal_comma"] == 1


def test_training_default_reads_as_before():
    """`fallback="none"` (the rewards' default): boxes only, the last box, no extended forms."""
    with Grader(GraderConfig(num_workers=1)) as grader:
        batch = grader.grade(
            ["25000", "-1, 3", "1000", "0.5"],
            ["The total is 25 000.", "\\boxed{3}, \\boxed{-1}", "\\boxed{1 000}", "\\boxed{0,5}"],
        )
    assert [v.status for v in batch.verdicts] == ["no_answer", "ok", "ok", "ok"]
    assert [v.extracted for v in batch.verdicts] == [None, "-1", "1 000", "0,5"]
    assert not any(v.correct for v in batch.verdicts[1:])
    for name in ("latex_spans", "last_numbers", "box_groups", "normalised_relations", "normalised_thousands"):
        assert batch.counters[name] == 0
    assert normalise_answer("1 000") == ("1 000", ())
    assert normalise_answer("x >= 5") == ("x >= 5", ())


def test_eval_grades_with_the_auto_reading_unless_told():
    import argparse

    from pasodoble.evals.cli import eval_grader_config, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    base = ["eval", "--model", "tiny:solver", "--out", "o"]
    assert eval_grader_config(parser.parse_args(base)).fallback == "auto"
    assert eval_grader_config(parser.parse_args([*base, "--grader-fallback", "none"])).fallback == "none"
    assert eval_grader_config().fallback == "auto"


def test_agreement_bench_reads_test_tables_without_running_them(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "mathverify_agreement.py"
    spec = importlib.util.spec_from_file_location("mathverify_agreement", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / "test_a.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('gold,pred,expected', [('1', '$1$', 1), ('2', 'x', 0)])\n"
        "def test_one(gold, pred, expected): raise SystemExit('never run')\n"
        "@pytest.mark.parametrize('gold, pred, expected', [(str(i), str(i), 1) for i in range(3)])\n"
        "def test_built(gold, pred, expected): pass\n"
        "@pytest.mark.parametrize('pred, expected', [('1', 1)])\n"
        "def test_other(pred, expected): pass\n"
    )
    cases, skipped = bench.load_cases(tmp_path)
    assert [(c["gold"], c["pred"], c["expected"]) for c in cases] == [("1", "$1$", True), ("2", "x", False)]
    assert cases[0]["where"] == "test_a.py::test_one[0]" and skipped == 1
