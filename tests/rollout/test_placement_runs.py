"""Rollout placement end to end on 2 training ranks (torchrun, gloo): dedicated (DDP; one vLLM server per role that
rank 0 starts and every rank shares; on a CPU machine the servers share its cores) and colocated (FSDP2; each rank
its own in-process vLLM engine, synced from the gathered full weights and written on rank 1 too, where
transformers' save_pretrained writes nothing: before that fix rank 1's first sync failed with vLLM's "Cannot find
any model weights").

The learning rate is high (1e-3) so that one update moves the log-probs by nats: a rank that sampled from a server
still holding the previous weights shows up in `rollout/logprob_diff/max` (measured with weight sync switched off:
2 to 17 nats from the second step on; with it, about 1e-5). Markers `vllm` and `distributed`: run with
`make test-vllm-all` (needs `make vllm-env`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.worlds import BUILD_BUDGET_S

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.distributed,
    pytest.mark.usefixtures("tiny_world_vllm"),
    pytest.mark.timeout(BUILD_BUDGET_S),
]

from tests.runs.test_vllm_runs import WORLD  # noqa: E402
from tests.scale.test_train_fsdp2 import torchrun as torchrun_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "num_threads=1",
    "schedule.steps=3",
    "schedule.passages_per_step=2",
    "proposer.num_generations=4",
    "solver.num_generations=4",
    "proposer.lr=1e-3",
    "solver.lr=1e-3",
    "proposer.engine=vllm_server",
    "solver.engine=vllm_server",
    "distributed.rollout=dedicated",
    "distributed.decisions_log=true",
    "distributed.timeout_s=600",
]


def torchrun(n: int, *args: str) -> subprocess.CompletedProcess:
    cmd = torchrun_command(n, *args)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


def check_run(run_dir) -> None:
    """Identical decisions on both ranks, and every update sampled from the weights it trained."""
    decisions = [(run_dir / "decisions" / f"rank-{r}.jsonl").read_text() for r in (0, 1)]
    assert decisions[0] == decisions[1] and len(decisions[0].splitlines()) == 3
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if "rollout/logprob_diff/max" in r]
    assert len(updates) >= 2  # at least one update sampled from weights that a sync had to deliver
    assert max(r["rollout/logprob_diff/max"] for r in updates) < 1e-3
    assert all(r["time/weight_sync_s"] > 0 for r in updates)


def test_two_ranks_share_one_dedicated_server_per_role(tmp_path):
    run_dir = tmp_path / "run"
    done = torchrun(2, "--config", "recipes/tiny-online.yaml", *WORLD, *RUN, f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rollouts from dedicated vLLM servers (proposer on the CPU, solver on the CPU)" in done.stdout
    started = re.findall(r"^(\w+): dedicated vLLM server at http://127\.0\.0\.1:(\d+) on the CPU for 2 rank\(s\)",
                         done.stdout, flags=re.M)  # fmt: skip
    assert sorted(name for name, _ in started) == ["proposer", "solver"]  # one server per role, not per rank
    ports = {port for _, port in started}
    leftover = [p for p in psutil.process_iter(["cmdline"]) if ports & set(p.info["cmdline"] or [])]
    assert leftover == []  # rank 0 stopped the servers it started
    assert len(list(run_dir.glob("vllm-server-*.log"))) == 2  # their logs stay in the run folder
    check_run(run_dir)


def test_fsdp2_ranks_sync_their_own_colocated_vllm_engines(tmp_path):
    run_dir = tmp_path / "run"
    colocated = [a for a in RUN if not a.startswith(("proposer.engine", "distributed.rollout"))]
    colocated = [a.replace("vllm_server", "vllm") for a in colocated]
    args = [*WORLD, *colocated, "distributed.backend=fsdp2", f"run_dir={run_dir}"]
    done = torchrun(2, "--config", "recipes/tiny-online.yaml", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    check_run(run_dir)
