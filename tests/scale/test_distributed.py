"""Collectives: the launcher environment, a 2-process gloo group, and a peer that dies or stops answering."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pasodoble.errors import UserError
from pasodoble.scale.collectives import SingleProcess, from_env, peer_lost

ROOT = Path(__file__).resolve().parents[2]


def test_single_process_collectives_are_identities():
    c = SingleProcess()
    assert c.broadcast(3) == 3 and c.all_gather("x") == ["x"] and c.barrier() is None


def test_a_lost_peer_is_told_apart_from_other_errors():
    """DDP's all-reduce reports a dead peer as a RuntimeError of gloo's; `pasodoble train` turns that into its
    one-line error (the other errors keep their traceback)."""
    gloo = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:62610: "
        "Connection reset by peer. This is typically caused by a remote worker hanging"
    )
    assert peer_lost(gloo) and peer_lost(RuntimeError("NCCL communicator was aborted on rank 1"))
    assert not peer_lost(RuntimeError("CUDA out of memory")) and not peer_lost(ValueError("gloo"))
    SingleProcess().fail_on_peer_loss(gloo, "training")  # one rank: nothing to do, the caller re-raises


def test_no_launcher_means_one_process(monkeypatch):
    for key in ("WORLD_SIZE", "RANK", "ACCELERATE_USE_CPU", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    assert isinstance(from_env(), SingleProcess)


def test_accelerate_cpu_launch_of_one_process_is_refused(monkeypatch):
    """`accelerate launch --cpu --num_processes 2` starts ONE process with MASTER_ADDR and no ranks."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(UserError, match="--multi_gpu --num_processes N"):
        from_env()


def test_world_size_without_rendezvous_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(UserError, match="MASTER_ADDR"):
        from_env()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """What torchrun sets for one rank of a one-node run."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def launch(scenario: str, world: int = 2, timeout_s: float = 30.0) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            **rank_env(rank, world, port),
            "TEST_TIMEOUT_S": str(timeout_s),
            "PYTHONPATH": str(ROOT),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.distributed_worker", scenario],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def last_json(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, err[-2000:]
    return proc.returncode, json.loads(lines[-1])


@pytest.mark.distributed
def test_two_ranks_broadcast_and_gather():
    results = [last_json(p) for p in launch("collectives", world=2)]
    for rc, out in results:
        assert rc == 0
        assert out["broadcast"] == {"from": 0}
        assert out["gather"] == [["r", 0], ["r", 1]]


@pytest.mark.distributed
@pytest.mark.parametrize("scenario", ["update", "update-checkpointing", "update-fsdp2", "update-fsdp2-mu2"])
def test_ddp_update_on_shares_equals_the_one_rank_update(scenario):
    """DDP (through Accelerate) and FSDP2 (torch's fully_shard, on CPU/gloo) average gradients; each share's loss
    carries its share of the full batch times the world size, so two ranks on 5 + 4 samples take the one-rank step
    on all 9 (two steps, Adam moments included). `mu2`: two optimizer steps per batch, the second pass on the
    weights gathered again after the first step."""
    # The collectives' hang guard at 120 s: on a loaded machine a rank can fall 30 s behind its peer.
    for rc, out in [last_json(p) for p in launch(scenario, world=2, timeout_s=120)]:
        assert rc == 0
        assert out["max_abs_diff"] < 1e-4  # lr 1e-2: below 1% of one step
        assert (out["sharded_params"] > 0) == scenario.startswith(
            "update-fsdp2"
        )  # FSDP2 holds DTensor shards
        for sharded, single in out["grad_norms"] + out["losses"]:
            assert sharded == pytest.approx(single, rel=1e-4, abs=1e-6)


def error_exit(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, float]:
    """(exit code, last stderr line, seconds from the barrier before the failure to the exit)."""
    out, err = proc.communicate(timeout=timeout)
    started = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])["started"]
    return proc.returncode, err.strip().splitlines()[-1], time.time() - started


@pytest.mark.distributed
def test_a_dead_rank_stops_the_others_with_a_clear_error():
    procs = launch("dead", world=3, timeout_s=60)
    assert procs[1].wait(timeout=300) == 3
    for rank in (0, 2):
        rc, line, after_s = error_exit(procs[rank])
        assert rc == 1
        assert line.startswith(f"pasodoble: error: rank {rank} of 3: all_gather(solver answers) failed"), line
        assert after_s < 60 + 10


@pytest.mark.distributed
def test_a_silent_rank_times_out_naming_the_operation():
    procs = launch("silent", world=2, timeout_s=4)
    rc, line, after_s = error_exit(procs[0])
    procs[1].kill()
    procs[1].wait()
    assert rc == 1 and "rank 0 of 2: all_gather(solver answers) failed (timeout 4s)" in line, line
    assert 3.5 <= after_s < 100


@pytest.mark.distributed
def test_ranks_wait_for_rank0_s_preparation_past_the_collective_timeout():
    """A one-time build longer than `timeout_s` (10 s against 3 s): rank 1 waits through the store, saying so, and
    the collectives after it work."""
    procs = launch("prepare-slow", world=2, timeout_s=3)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[1][1][-2000:]
    for out, _ in outs:
        assert json.loads(out.splitlines()[-1]) == {"gather": [0, 1]}
    assert "rank 1 of 2: waiting for rank 0's test build" in outs[1][1]


@pytest.mark.distributed
@pytest.mark.parametrize(
    "scenario, line",
    [
        ("prepare-failed", "rank 1 of 2: rank 0's test build failed: no space left on device"),
        ("prepare-over-budget", "rank 1 of 2: rank 0's test build took longer than 4s; raise"),
    ],
)
def test_a_failed_or_endless_preparation_ends_the_waiting_rank_with_one_line(scenario, line):
    procs = launch(scenario, world=2, timeout_s=3)
    _, err = procs[1].communicate(timeout=300)
    procs[0].kill()
    procs[0].wait()
    assert procs[1].returncode == 1
    assert err.strip().splitlines()[-1].startswith(f"pasodoble: error: {line}"), err[-2000:]
