"""`pasodoble train` on 2 and 3 CPU processes (gloo, Accelerate DDP): one run of N ranks, identical decisions.

Each rank writes RUN_DIR/decisions/rank-R.jsonl (`distributed.decisions_log`): per inner step the passages, the
gathered completions, rewards, advantages, learnable questions, skip decision, digests of the diversity history and
the question buffer, and bit-exact digests of both roles' weights. The tests compare those files across ranks
line by line, kill a rank mid-run and resume on another number of processes.

Why the 2-process metrics differ from the 1-process ones: each rank samples its share in its own generate() call
with its own seed (a batch's random draws depend on its composition), so the completions differ; the learning rule and every decision function are the same, so the
metrics agree in distribution (checked loosely here), not sample by sample.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.scale.test_distributed import free_port, rank_env
from tests.worlds import BUILD_BUDGET_S

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.usefixtures("tiny_world"),
    pytest.mark.timeout(BUILD_BUDGET_S),
]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SMALL = [
    "num_threads=1",
    "schedule.passages_per_step=2",
    "solver.num_generations=4",
    "schedule.checkpoint_every=1",
    "schedule.samples_every=1",
    "distributed.decisions_log=true",
    "distributed.timeout_s=120",
    "logging.quiet=true",
]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def accelerate(n: int, *args: str) -> list[str]:
    """The documented multi-process CPU launch (see docs/SCALE.md)."""
    return [
        str(BIN / "accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        str(n),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        "-m",
        "pasodoble",
        "train",
        *args,
    ]


def run(cmd: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_ranks_agree(run_dir: Path, world: int, steps: int, first: int = 1) -> list[dict]:
    """Every rank logged inner steps first..steps and the same thing at each of them."""
    logs = [
        [row for row in rows(run_dir / "decisions" / f"rank-{r}.jsonl") if row["step"] >= first]
        for r in range(world)
    ]
    for r in range(world):
        assert [row["step"] for row in logs[r]] == list(range(first, steps + 1)), f"rank {r}"
    for r in range(1, world):
        for a, b in zip(logs[0], logs[r], strict=True):
            assert a == b, f"rank {r} disagrees with rank 0 at inner step {a['step']}"
    return logs[0]


def assert_rank0_wrote_the_run(run_dir: Path, steps: int) -> list[dict]:
    metrics = [m for m in rows(run_dir / "metrics.jsonl") if "phase" in m]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert len(rows(run_dir / "samples.jsonl")) > 0
    assert (run_dir / "checkpoints" / "latest").exists()
    return metrics


def test_two_and_three_ranks_agree_step_by_step_and_track_one_rank(tmp_path):
    one, two, three = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    recipe = ["--config", "recipes/tiny-online.yaml", "schedule.steps=3"]
    run([sys.executable, "-m", "pasodoble", "train", *recipe, *SMALL, f"run_dir={one}"])
    run(accelerate(2, *recipe, *SMALL, f"run_dir={two}"))
    run(accelerate(3, *recipe[:-1], "schedule.steps=2", *SMALL, f"run_dir={three}"))
    log1 = assert_ranks_agree(one, 1, 3)
    log2 = assert_ranks_agree(two, 2, 3)
    assert_ranks_agree(three, 3, 2)
    # Same passages (a pure function of seed and step); the completions are sampled in other batches.
    assert [r["decision"]["passages"] for r in log1] == [r["decision"]["passages"] for r in log2]
    m1, m2 = assert_rank0_wrote_the_run(one, 3), assert_rank0_wrote_the_run(two, 3)
    assert_rank0_wrote_the_run(three, 2)
    for key in ("proposer/valid/fraction", "solver/correct/mean"):
        a, b = sum(m[key] for m in m1) / 3, sum(m[key] for m in m2) / 3
        assert abs(a - b) < 0.25, (key, a, b)
    config = (two / "config.yaml").read_text()
    assert "world_size: 2" in config and "backend: ddp" in config


def test_offline_on_two_ranks_agrees(tmp_path):
    out = tmp_path / "offline"
    run(
        accelerate(
            2,
            "--config",
            "recipes/tiny-offline.yaml",
            "schedule.steps=1",
            "schedule.proposer_phase_updates=1",
            "schedule.proposer_phase_max_attempts=2",
            "schedule.solver_phase_updates=2",
            *SMALL,
            f"run_dir={out}",
        )
    )
    log = rows(out / "decisions" / "rank-0.jsonl")
    assert_ranks_agree(out, 2, len(log))
    assert any("chosen" in r["decision"] for r in log)  # a Solver-phase (buffer) step ran


def test_two_adapters_of_one_shared_base_train_on_two_ranks(tmp_path):
    """`roles.shared_base`: DDP wraps each adapter view, so each role's optimizer sees its adapter's reduced
    gradients; ranks that reduced nothing (or the other adapter's) would log different weight digests."""
    out = tmp_path / "shared"
    lora = ["roles.shared_base=true", "proposer.lora.rank=8", "solver.lora.rank=8"]
    run(
        accelerate(
            2, "--config", "recipes/tiny-online.yaml", "schedule.steps=3", *lora, *SMALL, f"run_dir={out}"
        )
    )
    log = assert_ranks_agree(out, 2, 3)
    digests = [row["weights"]["solver"] for row in log]
    assert len(set(digests)) >= 2  # the adapters moved
    assert (out / "checkpoints" / "latest").exists()


def test_two_nodes_on_loopback_make_one_run(tmp_path):
    """The documented multi-node torchrun launch, both "nodes" on this machine (one process each, so LOCAL_RANK is
    0 on both ranks): one run of 2 ranks, not two runs."""
    out, port = tmp_path / "nodes", free_port()
    args = ["--config", "recipes/tiny-online.yaml", "schedule.steps=2", *SMALL, f"run_dir={out}"]
    nodes = [
        subprocess.Popen(
            [str(BIN / "torchrun"), "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1"]
            + ["--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "pasodoble", "train", *args],
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    for node in nodes:
        _, err = node.communicate(timeout=900)
        assert node.returncode == 0, err[-3000:]
    assert_ranks_agree(out, 2, 2)
    assert_rank0_wrote_the_run(out, 2)
    assert "world_size: 2" in (out / "config.yaml").read_text()


def spawn_ranks(world: int, args: list[str]) -> list[subprocess.Popen]:
    """The ranks as a launcher would start them, without one (so no launcher kills the survivors for us)."""
    port, procs = free_port(), []
    for rank in range(world):
        this_rank = {**env(), **rank_env(rank, world, port)}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pasodoble", "train", *args],
                cwd=ROOT,
                env=this_rank,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def test_killed_rank_stops_the_others_and_the_run_resumes_on_three(tmp_path):
    out = tmp_path / "killed"
    timeout_s, steps = 60, 8  # steps to spare after the kill: a tiny-world step can take well under a second
    args = [
        "--config",
        "recipes/tiny-online.yaml",
        f"schedule.steps={steps}",
        *SMALL,
        f"distributed.timeout_s={timeout_s}",
    ]
    procs = spawn_ranks(2, [*args, f"run_dir={out}"])
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if (out / "metrics.jsonl").exists() and len(rows(out / "metrics.jsonl")) >= 2:
            break
        assert procs[0].poll() is None, procs[0].communicate()[1][-2000:]
        time.sleep(0.1)
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    _, err = procs[0].communicate(timeout=timeout_s + 120)
    assert procs[0].returncode == 1, err[-2000:]
    assert time.monotonic() - killed_at < timeout_s + 60
    last = err.strip().splitlines()[-1]
    assert last.startswith("pasodoble: error: rank 0 of 2: ") and "a peer rank died" in last, last
    procs[1].communicate()
    resumed_at = int((out / "checkpoints" / "latest").read_text().strip().split("-")[-1])
    assert 1 <= resumed_at < steps
    run(accelerate(3, "--resume", str(out)))
    assert_rank0_wrote_the_run(out, steps)
    assert_ranks_agree(out, 2, steps)  # ranks 0 and 1: before the kill and after the resume
    assert_ranks_agree(out, 3, steps, first=resumed_at + 1)  # rank 2 joined at the checkpoint
    assert "world_size: 3" in (out / "config.yaml").read_text()
