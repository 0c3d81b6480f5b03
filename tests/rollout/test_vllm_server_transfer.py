"""A server's weights over vLLM's weight-transfer API (`vllm.weight_sync: gloo`, the project's gloo backend of that
protocol, registered inside the server by the worker extension): a real server on loopback, changed weights sent
twice over one group, outputs equal to those after the /dev/shm reload of the same weights. Marker `vllm` (the CPU
build: `make test-vllm`); `nccl`, the same path on a GPU, runs under marker `gpu` where CUDA and vLLM are present."""

from __future__ import annotations

import pytest
import torch

from tests.worlds import BUILD_BUDGET_S

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(BUILD_BUDGET_S),
]  # a server start takes 1-2 min on 2 cores

from pasodoble.rollout import SamplingParams  # noqa: E402
from pasodoble.rollout.server import VLLMServer, VLLMServerEngine  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_direct_sync import TOL, sample  # noqa: E402
from tests.rollout.test_vllm_engine import _max_gap, _model, _prompts  # noqa: E402

BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="nccl needs a CUDA device"),
        ],
    ),
]


@pytest.fixture(scope="module", params=BACKENDS)
def served(request, tmp_path_factory):
    tokenizer = make_tokenizer()
    model = _model(tokenizer)
    path = tmp_path_factory.mktemp("transfer-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    cfg = VLLMConfig(weight_sync=request.param)
    server = VLLMServer.start(path, cfg, max_model_len=128, log_dir=path / "logs")
    engines = {
        how: VLLMServerEngine(server.url, tokenizer, VLLMConfig(weight_sync=how), token=server.token)
        for how in (request.param, "shm")
    }
    yield model, tokenizer, engines[request.param], engines["shm"]
    for engine in engines.values():
        engine.close()
    server.stop()


def test_outputs_after_a_transfer_equal_outputs_after_the_shm_reload(served):
    model, tokenizer, transfer, shm = served
    assert transfer.sync in ("gloo", "nccl") and shm.sync == "shm"
    prompts = _prompts(tokenizer)
    before = sample(transfer, prompts, greedy=True)
    for round_ in range(2):  # the second round reuses the group the first one built
        with torch.no_grad():  # a trained step's worth of change, embedding (and so the tied head) included
            for p in model.parameters():
                p.add_(torch.randn_like(p), alpha=0.05)
        transfer.update_weights(model)
        sent = [sample(transfer, prompts, greedy) for greedy in (True, False)]
        gap = _max_gap(
            model, transfer, prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=3)
        )
        assert gap < TOL, f"round {round_}: the server's log-probs are {gap} off the trainer's"
        shm.update_weights(model)
        reloaded = [sample(shm, prompts, greedy) for greedy in (True, False)]
        for a, b in zip(sent, reloaded, strict=True):
            for ga, gb in zip(a, b, strict=True):
                for (ids_a, lp_a), (ids_b, lp_b) in zip(ga, gb, strict=True):
                    assert ids_a == ids_b
                    assert max(abs(x - y) for x, y in zip(lp_a, lp_b)) < TOL
        assert sent[0] != before  # the transfer changed what the server serves
        before = sent[0]
