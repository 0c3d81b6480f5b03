"""`verify-answers`: output fields, bad lines skipped with their numbers, summary line, user errors."""

from __future__ import annotations

import argparse
import json

import pytest

from pasodoble.errors import UserError
from pasodoble.grader.cli import main, register, run_verify_answers


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["verify-answers", *argv])


def test_verify_answers_grades_and_skips_bad_lines(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    lines = [
        json.dumps({"gold": "\\frac{1}{2}", "pred": "so \\boxed{0.5}", "id": 7}),
        "{not json",
        json.dumps({"gold": 27.0, "pred": "The answer is \\boxed{27}"}),
        json.dumps({"gold": "3"}),
        "",
        json.dumps({"gold": "x=3", "pred": "no answer here"}),
        json.dumps(["gold", "pred"]),
    ]
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "sub" / "out.jsonl"
    assert run_verify_answers(_args(str(source), "--out", str(out))) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["correct"], r["status"], r["extracted"]) for r in rows] == [
        (True, "ok", "0.5"),
        (True, "ok", "27"),
        (False, "no_answer", None),
    ]
    assert rows[0]["id"] == 7
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith(
        "in.jsonl:2: not valid JSON (Expecting property name enclosed in double quotes); line skipped"
    )
    assert "in.jsonl:4: 'pred' must be a string" in err[1]
    assert "in.jsonl:7: expected a JSON object" in err[2]
    assert err[-2].startswith(
        "verify-answers: 3 graded, 2 correct (66.7%), no_answer 1, timeouts 0, errors 0"
    )
    assert "bad lines skipped 3" in err[-2]
    assert "pass --no-extract" in err[-1] and "--fallback last_number" in err[-1]


def test_verify_answers_no_extract(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"gold": "2", "pred": "2.0"}) + "\n")
    assert run_verify_answers(_args(str(source), "--out", str(out), "--no-extract")) == 0
    assert json.loads(out.read_text())["correct"] is True


def test_no_hint_when_every_answer_is_found(tmp_path, capsys):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"gold": "2", "pred": "so \\boxed{2}"}) + "\n")
    assert run_verify_answers(_args(str(source), "--out", str(out))) == 0
    err = capsys.readouterr().err
    assert "1 graded, 1 correct" in err and "pass --no-extract" not in err and "only in part" not in err


def test_partial_parses_are_reported(tmp_path, capsys):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    gold = "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"  # math-verify reads it as 2/3
    source.write_text(json.dumps({"gold": gold, "pred": "so \\boxed{\\frac{2}{3}}"}) + "\n")
    assert run_verify_answers(_args(str(source), "--out", str(out))) == 0
    assert json.loads(out.read_text())["correct"] is True  # math-verify's verdict, kept
    assert "read 0 answer(s) and 1 gold answer(s) only in part" in capsys.readouterr().err
    assert run_verify_answers(_args(str(source), "--out", str(out), "--partial-parses", "reject")) == 0
    assert json.loads(out.read_text())["correct"] is False
    assert "so those pairs were graded wrong" in capsys.readouterr().err


def test_missing_input_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        run_verify_answers(_args(str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.jsonl")))


def test_standalone_entry_turns_user_errors_into_exit_2(tmp_path, capsys):
    code = main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--num-workers", "0"])
    assert code == 2
    assert "grader.num_workers" in capsys.readouterr().err
