"""Atomic checkpoints: temp folder + rename, `latest`, keep-last-N, leftovers of a killed writer, log truncation."""

from __future__ import annotations

import json

import pytest

from pasodoble.checkpoint import (
    clean_partial,
    latest_checkpoint,
    list_checkpoints,
    save_checkpoint,
    truncate_jsonl,
)


def writer(payload: str):
    def write(tmp):
        (tmp / "weights.bin").write_text(payload)
        (tmp / "state.json").write_text(json.dumps({"payload": payload}))

    return write


def test_save_renames_into_place_and_updates_latest(tmp_path):
    path = save_checkpoint(tmp_path, 3, writer("a"))
    assert path == tmp_path / "checkpoints" / "step-3" and (path / "weights.bin").read_text() == "a"
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step-3"
    assert not (tmp_path / "checkpoints" / "step-3.tmp").exists()
    assert latest_checkpoint(tmp_path) == path


def test_keep_last_prunes_oldest(tmp_path):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, writer(str(step)), keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    assert latest_checkpoint(tmp_path).name == "step-4"


def test_failed_writer_leaves_no_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 1, writer("ok"))

    def broken(tmp):
        (tmp / "weights.bin").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 2, broken)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert latest_checkpoint(tmp_path).name == "step-1"
    assert clean_partial(tmp_path) == ["step-2.tmp"]
    assert not (tmp_path / "checkpoints" / "step-2.tmp").exists()


def test_writer_must_mark_completion(tmp_path):
    with pytest.raises(RuntimeError, match="state.json"):
        save_checkpoint(tmp_path, 1, lambda tmp: (tmp / "weights.bin").write_text("x"))
    assert list_checkpoints(tmp_path) == []


def test_latest_falls_back_to_highest_complete_when_pointer_is_stale(tmp_path):
    save_checkpoint(tmp_path, 1, writer("1"))
    save_checkpoint(tmp_path, 2, writer("2"))
    (tmp_path / "checkpoints" / "latest").write_text("step-9\n")
    (tmp_path / "checkpoints" / "step-5").mkdir()  # no state.json: not a checkpoint
    assert latest_checkpoint(tmp_path).name == "step-2"
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_rewriting_an_existing_step_replaces_it(tmp_path):
    save_checkpoint(tmp_path, 1, writer("old"))
    save_checkpoint(tmp_path, 1, writer("new"))
    assert (latest_checkpoint(tmp_path) / "weights.bin").read_text() == "new"
    assert clean_partial(tmp_path) == []


def test_truncate_jsonl_keeps_rows_up_to_step_and_drops_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "a": 1}\n{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "x"')
    assert truncate_jsonl(path, 2) == 3
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2]
    assert truncate_jsonl(path, -1) == 0 and path.read_text() == ""
    assert truncate_jsonl(tmp_path / "missing.jsonl", 3) == 0
