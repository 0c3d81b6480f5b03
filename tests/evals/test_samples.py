"""Repair of an interrupted samples file: torn lines and unfinished problems go, finished ones stay."""

import json

import pytest

from pasodoble.errors import UserError
from pasodoble.evals.samples import load_resume_state


def _row(pid, sample, source="s"):
    return {"source": source, "id": pid, "sample": sample, "correct": True, "extracted": "1"}


def test_missing_file_is_a_fresh_start(tmp_path):
    state = load_resume_state(tmp_path / "none.jsonl", 2)
    assert state.finished == {} and state.torn_lines == 0


def test_torn_line_and_partial_problem_are_dropped_and_file_rewritten(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows = [_row("a", 0), _row("a", 1), _row("b", 0), _row("a", 0, source="t"), _row("a", 1, source="t")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"source": "s", "id": "b", "sam')
    state = load_resume_state(path, 2)
    assert set(state.finished) == {("s", "a"), ("t", "a")}
    assert state.torn_lines == 1 and state.partial_rows == 1
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(kept) == 4 and all(r["id"] == "a" for r in kept)
    again = load_resume_state(path, 2)  # a clean file is read back unchanged
    assert set(again.finished) == set(state.finished) and again.torn_lines == again.partial_rows == 0


def test_more_samples_than_k_is_a_user_error(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(_row("a", j)) + "\n" for j in range(3)))
    with pytest.raises(UserError, match="--num-samples is 2"):
        load_resume_state(path, 2)


def test_a_broken_line_in_the_middle_is_a_user_error(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(_row("a", 0)) + "\n{broken\n" + json.dumps(_row("a", 1)) + "\n")
    with pytest.raises(
        UserError, match=r"samples.jsonl:2: not valid JSON \(.*\); the samples file was edited"
    ):
        load_resume_state(path, 2)
