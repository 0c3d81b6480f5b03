"""A started vLLM server (the CPU build) refuses its dev routes and LoRA loads without the run's token, takes them
with it, reloads only from the run's own weight folder, and its start swept a killed run's shared-memory folder.

One server for the module, started the way a run starts it (`Placement.server_engine`), with LoRA on.
Marker `vllm`: run with `make test-vllm`."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from types import SimpleNamespace

import psutil
import pytest
import torch

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]  # a server start takes 1-3 min on 2 cores

from pasodoble.roles import adapters  # noqa: E402
from pasodoble.roles.adapters import LoraConfig  # noqa: E402
from pasodoble.rollout import SamplingParams  # noqa: E402
from pasodoble.rollout.placement import Placement  # noqa: E402
from pasodoble.rollout.server import EngineUnavailable, VLLMServerEngine, wait_until_healthy  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from pasodoble.rollout.shm import SHM_PREFIX, shm_root  # noqa: E402
from pasodoble.rollout.weights import write_weights  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_engine import _max_gap, _model, _prompts  # noqa: E402

TOL = 1e-4
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=6, seed=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tokenizer = make_tokenizer()
    model = _model(tokenizer)
    path = tmp_path_factory.mktemp("vllm-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    run_dir = tmp_path_factory.mktemp("run")
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()
    killed.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    stale = shm_root() / f"{SHM_PREFIX}{killed.pid}-server-test"
    kept = shm_root() / f"{SHM_PREFIX}{live.pid}-server-test"
    for folder in (stale, kept):
        write_weights(model, folder / "weights-1")  # what a SIGKILL during a sync leaves behind
    role_cfg = SimpleNamespace(
        vllm=VLLMConfig(max_lora_rank=8, cpu_kvcache_space_gb=1),
        max_sequence_length=128,
        dtype="float32",
    )
    engine = None
    try:
        engine = Placement(log_dir=str(run_dir)).server_engine(
            "solver", role_cfg, path, tokenizer, adapters=("solver",)
        )
        yield SimpleNamespace(
            engine=engine, model=model, tokenizer=tokenizer, run_dir=run_dir, stale=stale, kept=kept
        )
    finally:
        if engine is not None:
            engine.close()
        live.kill()
        live.wait()
        for folder in (stale, kept):
            subprocess.run(["rm", "-rf", str(folder)], check=True)


def post(url: str, path: str, body: dict, token: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=600) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def test_the_start_swept_a_killed_runs_folder_kept_a_live_ones_and_logs_in_the_run_folder(served):
    server = served.engine.server
    assert not served.stale.exists() and (served.kept / "weights-1").exists()
    assert server.log_path.parent == served.run_dir and server.log_path.stat().st_size > 0
    cmdline = " ".join(psutil.Process(server.process.pid).cmdline())
    assert "--middleware" in cmdline and server.token not in cmdline  # the token is not on the command line


def test_the_health_check_proves_the_answering_process_is_the_started_one(served):
    server = served.engine.server
    wait_until_healthy(server.url, 60, process=server, token=server.token)
    with pytest.raises(EngineUnavailable, match="a wrong proof"):
        wait_until_healthy(server.url, 60, token="not-the-runs-token")


def test_dev_routes_and_lora_loads_are_refused_without_the_runs_token(served, tmp_path):
    server = served.engine.server
    planted = tmp_path / "planted"
    write_weights(_model(served.tokenizer, seed=7), planted)
    adapter = tmp_path / "adapter"
    adapters.wrap_lora(_model(served.tokenizer), "x", LoraConfig(rank=4, alpha=8.0)).save_adapter(adapter)
    before = served.engine.generate(_prompts(served.tokenizer), GREEDY)
    calls = [
        ("/collective_rpc", {"method": "pasodoble_reload", "args": [str(planted)]}),
        ("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(planted)}}),
        ("/v1/load_lora_adapter", {"lora_name": "solver-v2", "lora_path": str(adapter)}),
        ("/reset_prefix_cache", {}),
        ("/v1/completions", {"model": "base", "prompt": [1, 2], "max_tokens": 2}),
        ("/init_weight_transfer_engine", {"init_info": {"master_address": "127.0.0.1", "master_port": 1}}),
        ("/start_weight_update", {}),
        ("/update_weights", {"update_info": {"names": [], "dtype_names": [], "shapes": []}}),
        ("/finish_weight_update", {}),
    ]
    for path, body in calls:
        for token in (None, "wrong", server.token + "x"):
            status, text = post(server.url, path, body, token)
            assert status == 401, (path, token, status, text)
    status, text = post(server.url, "/v1/models", {}, None)
    assert status == 401
    assert served.engine.generate(_prompts(served.tokenizer), GREEDY) == before  # the weights did not move


def test_with_the_token_reload_takes_only_the_runs_own_folder(served, tmp_path):
    server = served.engine.server
    planted = tmp_path / "planted"
    write_weights(_model(served.tokenizer, seed=7), planted)
    before = served.engine.generate(_prompts(served.tokenizer), GREEDY)
    body = {"method": "pasodoble_reload", "args": [str(planted)]}
    status, text = post(server.url, "/collective_rpc", body, server.token)
    assert status != 200, text
    assert served.engine.generate(_prompts(served.tokenizer), GREEDY) == before
    assert "pasodoble_reload refused" in server.log_path.read_text(errors="replace")
    changed = _model(served.tokenizer, seed=3)
    served.engine.update_weights(changed)  # the run's own folder, with the run's token
    prompts = _prompts(served.tokenizer)
    assert (
        _max_gap(
            changed, served.engine, prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=1)
        )
        < TOL
    )


def test_with_the_token_a_lora_adapter_loads_and_is_sampled(served):
    view = adapters.wrap_lora(_model(served.tokenizer, seed=3), "solver", LoraConfig(rank=4, alpha=8.0))
    with torch.no_grad():
        for p in view.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    served.engine.update_weights(_model(served.tokenizer, seed=3))  # the base of the adapter
    lora = served.engine.for_adapter("solver")
    lora.update_weights(view)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=2)
    assert _max_gap(view.eval(), lora, _prompts(served.tokenizer), sampling) < TOL


def test_an_engine_without_the_token_is_refused_with_a_line_naming_vllm_api_key(served, monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    outsider = VLLMServerEngine(served.engine.url, served.tokenizer, VLLMConfig())
    try:
        with pytest.raises(EngineUnavailable, match="refused the run's token.*VLLM_API_KEY"):
            outsider.generate(_prompts(served.tokenizer), GREEDY)
    finally:
        outsider.close()
