"""Shared-memory weight folders: dead runs' folders are swept at start-up, live ones and others' stay; the reload
method loads only from the run's own folder. Real folders (under /dev/shm for the start-up path), real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pasodoble.rollout.shm import (
    PIDNS_FILE,
    SHM_PREFIX,
    make_shm_dir,
    owner_pid,
    pid_namespace,
    shm_root,
    sweep_stale,
    weights_folder_refusal,
)


@pytest.fixture
def dead_pid() -> int:
    """The PID of a process that ran and ended (a run killed with SIGKILL)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    p.kill()
    p.wait()
    return p.pid


@pytest.fixture
def live_pid():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p.pid
    p.kill()
    p.wait()


def test_owner_pid_reads_the_folder_name():
    assert owner_pid("pasodoble-vllm-1234-server-abc") == 1234
    assert owner_pid("pasodoble-vllm-server-abc") is None  # the old unnamed layout is left alone
    assert owner_pid("pasodoble-vllm-0-x") is None and owner_pid("other-1234-x") is None


def test_sweep_removes_dead_owners_folders_only(tmp_path, dead_pid, live_pid):
    dead = tmp_path / f"{SHM_PREFIX}{dead_pid}-server-a"
    live = tmp_path / f"{SHM_PREFIX}{live_pid}-server-b"
    unnamed = tmp_path / f"{SHM_PREFIX}server-c"
    target = tmp_path / "elsewhere"
    for folder in (dead, live, unnamed, target):
        (folder / "weights-1").mkdir(parents=True)
        (folder / "weights-1" / "model.safetensors").write_bytes(b"x" * 1024)
    link = tmp_path / f"{SHM_PREFIX}{dead_pid}-engine-link"
    link.symlink_to(target)
    assert sweep_stale(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and unnamed.exists() and link.is_symlink()
    assert (target / "weights-1" / "model.safetensors").exists()  # a link is never followed


def test_sweep_leaves_folders_of_another_pid_namespace(tmp_path, dead_pid):
    """Containers sharing one /dev/shm: a PID that is dead here may be a live run there."""
    other, here, older = (tmp_path / f"{SHM_PREFIX}{dead_pid}-server-{k}" for k in "abc")
    for folder in (other, here, older):
        folder.mkdir()
    (other / PIDNS_FILE).write_text("pid:[1]")
    (here / PIDNS_FILE).write_text(pid_namespace())
    assert sorted(sweep_stale(tmp_path)) == sorted([here, older])
    assert other.exists()


def test_a_new_folder_records_its_pid_namespace(tmp_path):
    folder = make_shm_dir("test", root=tmp_path)
    assert (folder / PIDNS_FILE).read_text() == pid_namespace()


def test_sweep_leaves_other_users_folders(tmp_path, dead_pid):
    folder = tmp_path / f"{SHM_PREFIX}{dead_pid}-server-a"
    folder.mkdir()
    assert sweep_stale(tmp_path, uid=os.getuid() + 1) == []  # as if the folder were another user's
    assert folder.exists()


def test_an_engine_start_sweeps_a_killed_runs_folder_in_shared_memory(dead_pid, live_pid):
    """The start-up path itself (`make_shm_dir`, which every vLLM engine and server client calls)."""
    root = shm_root()
    dead = root / f"{SHM_PREFIX}{dead_pid}-server-test"
    live = root / f"{SHM_PREFIX}{live_pid}-server-test"
    mine = None
    try:
        for folder in (dead, live):
            (folder / "weights-3").mkdir(parents=True)
        mine = make_shm_dir("test")
        assert not dead.exists() and live.exists()
        assert mine.name.startswith(f"{SHM_PREFIX}{os.getpid()}-test-") and mine.parent == root
    finally:
        for folder in (dead, live, mine):
            if folder is not None:
                subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_reload_accepts_only_real_folders_inside_the_runs_own_root(tmp_path):
    root = tmp_path / f"{SHM_PREFIX}1-server-x"
    (root / "weights-1").mkdir(parents=True)
    outside = tmp_path / "attacker"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    assert weights_folder_refusal(str(root / "weights-1"), str(root)) is None
    assert "not inside" in weights_folder_refusal(str(outside), str(root))
    assert "not inside" in weights_folder_refusal(str(root / ".." / "attacker"), str(root))
    assert "not inside" in weights_folder_refusal(str(root), str(root))
    assert "symbolic link" in weights_folder_refusal(str(root / "link"), str(root))
    assert "not absolute" in weights_folder_refusal("weights-1", str(root))
    assert "does not exist" in weights_folder_refusal(str(root / "weights-2"), str(root))
    assert "not set" in weights_folder_refusal(str(root / "weights-1"), None)
    assert "user" in weights_folder_refusal(str(root / "weights-1"), str(root), uid=os.getuid() + 1)


def test_a_serve_server_accepts_only_pasodoble_folders_of_shared_memory(tmp_path):
    """`pasodoble serve` does not know its clients' folders: its root is the shared-memory folder itself."""
    (tmp_path / f"{SHM_PREFIX}7-server-x" / "weights-1").mkdir(parents=True)
    (tmp_path / "someone-else" / "weights-1").mkdir(parents=True)
    assert (
        weights_folder_refusal(str(tmp_path / f"{SHM_PREFIX}7-server-x" / "weights-1"), str(tmp_path)) is None
    )
    refusal = weights_folder_refusal(str(tmp_path / "someone-else" / "weights-1"), str(tmp_path))
    assert "pasodoble-vllm-* folder" in refusal
