"""Durable file helpers: new files follow the umask; a full disk is one line and leaves the file as it was."""

from __future__ import annotations

import errno
import os
import stat

import pytest

import pasodoble.io as pio
from pasodoble.errors import UserError
from pasodoble.io import append_jsonl, current_umask, read_jsonl, write_json_atomic, write_text_atomic


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_atomic_writes_and_appends_follow_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert current_umask() == mask
        write_text_atomic(tmp_path / "a.txt", "x")
        write_json_atomic(tmp_path / "b.json", {"a": 1})
        append_jsonl(tmp_path / "c.jsonl", [{"step": 0}])
    finally:
        os.umask(old)
    for name in ("a.txt", "b.json", "c.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask, name


def _full_after(limit: int):
    """An `os.write` that writes `limit` bytes in all, then fails as a full disk does."""
    real, left = os.write, [limit]

    def write(fd, data):
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    return write


def test_append_on_a_full_disk_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    append_jsonl(path, [{"step": 0, "a": 1}])
    before = path.read_bytes()
    monkeypatch.setattr(os, "write", _full_after(7))
    with pytest.raises(UserError) as caught:
        append_jsonl(path, [{"step": 1, "a": 2}, {"step": 2, "a": 3}])
    monkeypatch.undo()
    assert str(caught.value).startswith("no space left on device writing ") and str(path) in str(caught.value)
    assert path.read_bytes() == before and read_jsonl(path, strict=True) == [{"step": 0, "a": 1}]


def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    write_text_atomic(path, "old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pio.os, "fsync", full)
    with pytest.raises(UserError, match="no space left on device writing .*run.json"):
        write_text_atomic(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_is_disk_full_reads_errno_text_and_chains():
    assert pio.is_disk_full(OSError(errno.ENOSPC, "x"))
    assert pio.is_disk_full(
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    )
    wrapped = RuntimeError("write failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert pio.is_disk_full(wrapped)
    assert not pio.is_disk_full(OSError(errno.EACCES, "Permission denied"))
