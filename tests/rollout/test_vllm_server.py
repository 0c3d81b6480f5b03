"""Server mode on the tiny world: a run with the Solver on a vLLM server the project starts (and stops), and a
server killed mid-run (a clear error, a checkpoint that resumes). Marker `vllm`: run with `make test-vllm`."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import psutil
import pytest

from tests.worlds import BUILD_BUDGET_S

pytest.importorskip("vllm")
pytestmark = [  # a server start takes 1-2 min on 2 cores
    pytest.mark.vllm,
    pytest.mark.usefixtures("tiny_world_vllm"),
    pytest.mark.timeout(BUILD_BUDGET_S),
]

from pasodoble import checkpoint  # noqa: E402
from pasodoble.config import load_config  # noqa: E402
from pasodoble.rollout.server import EngineUnavailable, VLLMServer  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from pasodoble.runs.train import TrainConfig, resolve, run_train  # noqa: E402
from tests.runs.test_vllm_runs import CHEAP, WORLD  # noqa: E402


def config(run_dir, *overrides):
    cfg = load_config(TrainConfig, "recipes/tiny-online.yaml", [*WORLD, *CHEAP, *overrides])
    cfg.run_dir = str(run_dir)
    return cfg


def vllm_servers() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "vllm.entrypoints.openai.api_server" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def test_server_mode_run_completes_and_stops_its_server(tmp_path):
    cfg = config(tmp_path / "run", "schedule.steps=3", "solver.engine=vllm_server")
    run_train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert all(r["solver/logprob_diff/max"] < 1e-3 for r in rows if "solver/logprob_diff/max" in r)
    assert vllm_servers() == []
    assert list((tmp_path / "run").glob("vllm-server-*.log"))  # the server's log stays in the run folder


def test_killed_server_ends_the_run_with_a_clear_error_and_a_resumable_checkpoint(tmp_path, monkeypatch):
    probe = config(tmp_path / "unused")
    solver_dir = resolve(probe.solver.model, probe)
    server = VLLMServer.start(solver_dir, VLLMConfig(), max_model_len=256, log_dir=tmp_path)
    monkeypatch.setenv("VLLM_API_KEY", server.token)  # a given server_url: the client sends VLLM_API_KEY
    run_dir = tmp_path / "run"
    cfg = config(
        run_dir,
        "schedule.steps=20",
        "schedule.checkpoint_every=1",
        "solver.engine=vllm_server",
        f"solver.vllm.server_url={server.url}",
    )

    def kill_after_first_checkpoint():
        deadline = time.monotonic() + 1800
        while checkpoint.latest_checkpoint(run_dir) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        os.killpg(server.process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    killer.start()
    try:
        with pytest.raises(EngineUnavailable, match="stopped answering.*--resume"):
            run_train(cfg)
    finally:
        server.stop()
    killer.join(timeout=60)
    ckpt = checkpoint.latest_checkpoint(run_dir)
    assert ckpt is not None
    done = int(ckpt.name.split("-")[1])
    resumed = load_config(
        TrainConfig, run_dir / "config.yaml", [f"schedule.steps={done + 1}", "solver.engine=hf"]
    )
    resumed.run_dir = str(run_dir)
    run_train(resumed, resume=True)
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == done + 1
