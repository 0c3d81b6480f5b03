"""`pasodoble.allocator`: which malloc a setting asks for (pure, with a scripted library finder), and the real
relaunch of a process onto TCMalloc where the machine has it (`make allocator-env`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pasodoble import allocator

HAS_TCMALLOC = allocator.find("tcmalloc") is not None
GPU_VISIBLE = allocator.gpu_visible  # the real check (the fixture below stands in for it)


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """The pure checks read as on a CPU machine, whatever this one shows."""
    monkeypatch.setattr(allocator, "gpu_visible", lambda environ: False)


def installed(*names):
    return lambda name: f"lib{allocator.LIBRARIES[name]}.so.4" if name in names else None


def test_auto_takes_tcmalloc_when_installed_and_glibc_otherwise():
    assert allocator.choose("auto", installed("tcmalloc", "jemalloc")) == (
        "tcmalloc",
        "libtcmalloc_minimal.so.4",
    )
    assert allocator.choose("auto", installed("jemalloc")) == (None, None)
    assert allocator.choose("", installed("tcmalloc"))[0] == "tcmalloc"  # unset means auto
    assert allocator.choose("JEMALLOC", installed("jemalloc"))[0] == "jemalloc"
    assert allocator.choose("system", installed("tcmalloc")) == (None, None)


def test_an_allocator_named_but_missing_or_unknown_says_how_to_fix_it():
    with pytest.raises(ValueError, match="apt-get install libtcmalloc-minimal4"):
        allocator.choose("tcmalloc", installed())
    with pytest.raises(ValueError, match="use one of auto, tcmalloc, jemalloc, system"):
        allocator.choose("mimalloc", installed("tcmalloc"))


def test_the_new_start_preloads_it_once_and_keeps_a_users_preload():
    env = allocator.launch_env("auto", {"PATH": "/bin"}, installed("tcmalloc"))
    assert env["LD_PRELOAD"] == "libtcmalloc_minimal.so.4" and env[allocator.GUARD] == "tcmalloc"
    assert env["PATH"] == "/bin" and int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40
    assert allocator.launch_env("auto", env, installed("tcmalloc")) is None  # the new start goes on
    other = allocator.launch_env("auto", {"LD_PRELOAD": "libfoo.so"}, installed("tcmalloc"))
    assert other["LD_PRELOAD"] == "libtcmalloc_minimal.so.4:libfoo.so"
    # the user preloaded an allocator, or asked for glibc's, or none is installed: nothing to do
    assert allocator.launch_env("auto", {"LD_PRELOAD": "/x/libjemalloc.so.2"}, installed("tcmalloc")) is None
    assert allocator.launch_env("system", {}, installed("tcmalloc")) is None
    assert allocator.launch_env("auto", {}, installed()) is None


def test_active_reads_the_mapped_libraries(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10\n")
    assert allocator.active(maps) == "tcmalloc"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator.active(maps) == "system"
    assert allocator.active(tmp_path / "missing") == "system"


def test_auto_keeps_glibc_where_a_gpu_is_visible_and_a_named_allocator_still_loads():
    gpu = lambda environ: True  # noqa: E731
    assert allocator.launch_env("auto", {}, installed("tcmalloc"), gpu=gpu) is None
    assert (
        allocator.launch_env("tcmalloc", {}, installed("tcmalloc"), gpu=gpu)["LD_PRELOAD"]
        == "libtcmalloc_minimal.so.4"
    )


def test_a_gpu_is_visible_through_a_device_node_unless_cuda_visible_devices_hides_it(tmp_path):
    real = GPU_VISIBLE
    assert not real({}, dev=tmp_path)
    (tmp_path / "nvidia0").touch()
    assert real({}, dev=tmp_path) and real({"CUDA_VISIBLE_DEVICES": "0"}, dev=tmp_path)
    assert not real({"CUDA_VISIBLE_DEVICES": ""}, dev=tmp_path) and not real(
        {"CUDA_VISIBLE_DEVICES": "-1"}, dev=tmp_path
    )


def test_the_new_start_takes_the_preload_out_of_its_childrens_environment():
    env = allocator.launch_env("auto", {"LD_PRELOAD": "libfoo.so", "PATH": "/bin"}, installed("tcmalloc"))
    allocator.settle(env)
    assert env["LD_PRELOAD"] == "libfoo.so" and allocator.GUARD not in env and env["PATH"] == "/bin"
    alone = allocator.launch_env("auto", {}, installed("tcmalloc"))
    allocator.settle(alone)
    assert "LD_PRELOAD" not in alone and allocator.GUARD not in alone
    users = {"LD_PRELOAD": "/x/libtcmalloc_minimal.so.4"}  # the user's own preload, not the relaunch's: kept
    allocator.settle(users)
    assert users == {"LD_PRELOAD": "/x/libtcmalloc_minimal.so.4"}


_PROBE = """
import os, sys
from pasodoble import allocator
print("start", os.getpid(), allocator.active(), flush=True)
allocator.relaunch(sys.argv[1])
print("running", os.getpid(), allocator.active(), flush=True)
allocator.settle()
import subprocess
child = "import os; from pasodoble import allocator; print('child', allocator.active(), flush=True)"
subprocess.run([sys.executable, "-c", child], check=True)
"""


def _probe(setting: str, **env) -> tuple[list[list[str]], str]:
    run_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.GUARD)}
    run_env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run, on any machine
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, setting],
        capture_output=True,
        text=True,
        timeout=120,
        env={**run_env, **env},
        check=True,
    )
    return [line.split() for line in done.stdout.splitlines()], done.stderr


@pytest.mark.skipif(not HAS_TCMALLOC, reason="TCMalloc is not installed (make allocator-env)")
def test_a_process_starts_again_on_tcmalloc_with_its_pid_and_arguments():
    lines, _ = _probe("auto")
    assert [line[0] for line in lines] == [
        "start",
        "start",
        "running",
        "child",
    ]  # one relaunch, then it goes on
    assert lines[0][2] == "system" and lines[1][2] == lines[2][2] == "tcmalloc"
    assert lines[3][1] == "system"  # its child process does not inherit the preload
    assert (
        len({line[1] for line in lines[:3]}) == 1
    )  # the same process (exec), so a supervisor's PID stays valid


def test_glibc_asked_for_or_a_bad_setting_runs_on_without_a_new_start():
    lines, _ = _probe("system")
    assert [line[0] for line in lines] == ["start", "running", "child"] and lines[1][2] == "system"
    lines, err = _probe("mimalloc")
    assert [line[0] for line in lines] == ["start", "running", "child"] and lines[1][2] == "system"
    assert "PASODOBLE_ALLOCATOR='mimalloc': use one of auto" in err and "going on with glibc's malloc" in err
