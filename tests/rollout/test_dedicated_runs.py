"""Dedicated rollouts end to end: 2 training ranks (torchrun, gloo DDP) share one vLLM server per role that rank 0
starts (`distributed.rollout=dedicated`); on this CPU machine the servers share its cores.

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

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.distributed, pytest.mark.timeout(1800)]

from tests.test_train_fsdp2 import torchrun as torchrun_command  # noqa: E402
from tests.test_vllm_runs import WORLD  # noqa: E402

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


def test_two_ranks_share_one_dedicated_server_per_role(tmp_path):
    run_dir = tmp_path / "run"
    done = torchrun(2, "--config", "recipes/tiny-online.yaml", *WORLD, *RUN, f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rollouts from dedicated vLLM servers (proposer on the CPU, solver on the CPU)" in done.stdout
    started = re.findall(r"^(\w+): dedicated vLLM server at http://127\.0\.0\.1:(\d+) on the CPU, shared by 2 ranks",
                         done.stdout, flags=re.M)  # fmt: skip
    assert sorted(name for name, _ in started) == ["proposer", "solver"]  # one server per role, not per rank
    ports = {port for _, port in started}
    leftover = [p for p in psutil.process_iter(["cmdline"]) if ports & set(p.info["cmdline"] or [])]
    assert leftover == []  # rank 0 stopped the servers it started
    decisions = [(run_dir / "decisions" / f"rank-{r}.jsonl").read_text() for r in (0, 1)]
    assert decisions[0] == decisions[1] and len(decisions[0].splitlines()) == 3
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if "rollout/logprob_diff/max" in r]
    assert len(updates) >= 2  # at least one update sampled from weights that a sync had to deliver
    assert max(r["rollout/logprob_diff/max"] for r in updates) < 1e-3
    assert all(r["time/weight_sync_s"] > 0 for r in updates)
