"""Atomic checkpoints: temp folder + rename, `latest`, keep-last-N, leftovers of a killed writer, log truncation;
manifests and damaged checkpoints, full disks, code-free loading of torch files, file modes."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import stat

import pytest
import torch

from pasodoble.checkpoint import (
    MANIFEST,
    clean_partial,
    latest_checkpoint,
    list_checkpoints,
    load_torch_state,
    save_checkpoint,
    select_for_resume,
    truncate_jsonl,
    verify_checkpoint,
)
from pasodoble.errors import UserError


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


def test_failed_writer_leaves_no_checkpoint_and_removes_its_folder(tmp_path):
    save_checkpoint(tmp_path, 1, writer("ok"))

    def broken(tmp):
        (tmp / "weights.bin").write_text("half")
        raise OSError("permission denied")

    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 2, broken)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert latest_checkpoint(tmp_path).name == "step-1"
    assert not (tmp_path / "checkpoints" / "step-2.tmp").exists()
    (tmp_path / "checkpoints" / "step-3.tmp").mkdir()  # what a SIGKILL mid-write leaves behind
    assert clean_partial(tmp_path) == ["step-3.tmp"]


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


def test_manifest_lists_every_file_with_size_and_sha256(tmp_path):
    path = save_checkpoint(tmp_path, 1, writer("abc"))
    files = json.loads((path / MANIFEST).read_text())["files"]
    assert sorted(files) == ["state.json", "weights.bin"]
    assert files["weights.bin"] == {"size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert verify_checkpoint(path) == (None, True)


def _truncate(folder):
    (folder / "weights.bin").write_text("ab")


def _flip(folder):
    (folder / "weights.bin").write_text("abd")


DAMAGE = {
    "truncated": (_truncate, "weights.bin is 2 bytes, the manifest says 3"),
    "bad checksum": (_flip, "weights.bin fails its sha256 check"),
    "state.json deleted": (lambda f: (f / "state.json").unlink(), "state.json is missing"),
    "weights deleted": (lambda f: (f / "weights.bin").unlink(), "weights.bin is missing"),
    "planted file": (lambda f: (f / "pytorch_model.bin").write_bytes(b"x"), "pytorch_model.bin is not in"),
    "manifest torn": (lambda f: (f / MANIFEST).write_text('{"files": {"sta'), "manifest.json is unreadable"),
    "state only manifest gone": (
        lambda f: [(f / MANIFEST).unlink(), (f / "state.json").unlink()],
        "manifest.json and state.json are missing",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_newest_checkpoint_is_named_and_the_intact_one_resumed(tmp_path, damage):
    save_checkpoint(tmp_path, 1, writer("abc"))
    newest = save_checkpoint(tmp_path, 2, writer("abc"))
    apply, problem = DAMAGE[damage]
    apply(newest)
    warnings = []
    chosen = select_for_resume(tmp_path, warn=warnings.append)
    assert chosen.name == "step-1"
    assert len(warnings) == 1 and "step-2" in warnings[0] and problem in warnings[0], warnings
    assert (tmp_path / "checkpoints" / "step-2.damaged").is_dir() and not newest.exists()  # kept for a look


def test_deleted_state_json_is_reported_not_skipped_silently(tmp_path):
    save_checkpoint(tmp_path, 1, writer("a"))
    (save_checkpoint(tmp_path, 2, writer("b")) / "state.json").unlink()
    warnings = []
    assert select_for_resume(tmp_path, warn=warnings.append).name == "step-1"
    assert warnings and "state.json is missing" in warnings[0]


def test_strict_resume_stops_at_the_damaged_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 1, writer("abc"))
    _truncate(save_checkpoint(tmp_path, 2, writer("abc")))
    with pytest.raises(UserError, match=r"step-2 is damaged \(weights.bin is 2 bytes.*--strict-resume"):
        select_for_resume(tmp_path, strict=True, warn=pytest.fail)
    assert (tmp_path / "checkpoints" / "step-2").is_dir()  # nothing moved


def test_no_intact_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    _truncate(save_checkpoint(tmp_path, 1, writer("abc")))
    with pytest.raises(UserError, match="no intact checkpoint.*damaged: step-1"):
        select_for_resume(tmp_path, warn=lambda line: None)
    assert select_for_resume(tmp_path / "fresh") is None


def test_checkpoint_without_manifest_resumes_unverified_with_a_warning(tmp_path):
    legacy = tmp_path / "checkpoints" / "step-4"
    legacy.mkdir(parents=True)
    (legacy / "state.json").write_text("{}")
    warnings = []
    assert select_for_resume(tmp_path, warn=warnings.append) == legacy
    assert len(warnings) == 1 and "no manifest.json" in warnings[0] and "unverified" in warnings[0]


def test_disk_full_removes_the_partial_folder_and_says_so_in_one_line(tmp_path):
    first = save_checkpoint(tmp_path, 1, writer("ok"))

    def full(tmp):
        (tmp / "weights.bin").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UserError) as caught:
        save_checkpoint(tmp_path, 2, full)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("no space left on device") and "step-2.tmp" in line
    assert not (tmp_path / "checkpoints" / "step-2.tmp").exists()
    assert select_for_resume(tmp_path, warn=pytest.fail) == first


def test_disk_full_without_errno_is_recognised_by_the_free_space(tmp_path, monkeypatch):
    """torch's zip writer reports a full disk as a RuntimeError without errno."""

    def torch_like(tmp):
        (tmp / "weights.bin").write_text("half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    real = os.statvfs
    monkeypatch.setattr(
        os, "statvfs", lambda p: type("S", (), {"f_bavail": 3, "f_frsize": real(p).f_frsize})()
    )
    with pytest.raises(UserError, match="no space left on device"):
        save_checkpoint(tmp_path, 1, torch_like)
    monkeypatch.setattr(os, "statvfs", real)
    with pytest.raises(RuntimeError, match="inline_container"):  # with room left it stays what it is
        save_checkpoint(tmp_path, 1, torch_like)
    assert list(p.name for p in (tmp_path / "checkpoints").iterdir()) == []


class Payload:
    """Unpickling this would create `marker`: a stand-in for arbitrary code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_load_torch_state_refuses_pickled_code_and_reads_states(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"optimizer": Payload(marker)}, tmp_path / "evil.pt")
    with pytest.raises(UserError, match=r"evil.pt: refused to load") as caught:
        load_torch_state(tmp_path / "evil.pt")
    assert "\n" not in str(caught.value) and not marker.exists()
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp_path / "rng.pt")
    state = load_torch_state(tmp_path / "rng.pt")
    assert torch.equal(state["torch"], torch.get_rng_state()) and state["python"] == random.getstate()
    (tmp_path / "torn.pt").write_bytes((tmp_path / "rng.pt").read_bytes()[:100])
    with pytest.raises(UserError, match="torn.pt: unreadable checkpoint file"):
        load_torch_state(tmp_path / "torn.pt")


def test_checkpoint_files_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        path = save_checkpoint(tmp_path, 1, writer("a"))
    finally:
        os.umask(old)
    for name in (path / MANIFEST, tmp_path / "checkpoints" / "latest"):
        assert stat.S_IMODE(name.stat().st_mode) == 0o640, name
