"""The trainer side of the weight transfer (`rollout.transfer`) against the worker side of its protocol in this
process: the routes in order with JSON bodies, the group built once, every tensor once in the engine's dtype over a
real gloo group. Needs vllm importable (its weight-transfer classes), no server: marker `vllm`, seconds."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from pasodoble.rollout.gloo_transfer import BACKEND, broadcast, open_group  # noqa: E402
from pasodoble.rollout.transfer import ModelSource, Transfer  # noqa: E402
from pasodoble.rollout.weights import cast_tensors  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_engine import _model  # noqa: E402


class WorkerSide:
    """The server's routes as `post` sees them: each body goes through JSON, the tensors through the gloo group."""

    def __init__(self):
        self.calls, self.received, self.group = [], {}, None

    def post(self, path: str, body: dict, timeout: float | None = None) -> dict:
        body = json.loads(json.dumps(body))  # what crosses HTTP
        self.calls.append(path)
        if path == "/init_weight_transfer_engine":
            info = body["init_info"]
            assert info["rank_offset"] == 1 and info["world_size"] == 2
            self.group = open_group(
                info["master_address"], info["master_port"], 1, info["world_size"], info["timeout_s"]
            )
        elif path == "/update_weights":
            info = body["update_info"]
            for name, dtype, shape in zip(info["names"], info["dtype_names"], info["shapes"], strict=True):
                tensor = torch.empty(shape, dtype=getattr(torch, dtype))
                broadcast(self.group, tensor)
                self.received[name] = tensor
        elif path == "/collective_rpc":
            assert body["method"] == "pasodoble_retie_head"
        return {}


@pytest.fixture
def model():
    return _model(make_tokenizer())


def test_metadata_declares_what_iteration_yields(model):
    source = ModelSource(model, torch.bfloat16, torch.device("cpu"))
    meta = source.metadata()
    pairs = list(source)
    assert [(m.name, m.dtype, m.shape) for m in meta] == [(n, t.dtype, tuple(t.shape)) for n, t in pairs]
    names = [m.name for m in meta]
    assert len(names) == len(set(names)) and "lm_head.weight" not in names  # the tied head travels once
    assert all(m.dtype == torch.bfloat16 for m in meta)


def test_a_transfer_builds_its_group_once_and_sends_every_tensor_in_the_engine_dtype(model):
    worker = WorkerSide()
    transfer = Transfer(
        BACKEND, "http://127.0.0.1:1", worker.post, workers=1, dtype=torch.bfloat16, timeout_s=60
    )
    for round_ in range(2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p), alpha=0.05)
        transfer.send(model)
        expected = dict(cast_tensors(model, torch.bfloat16))
        assert worker.received.keys() == expected.keys()
        assert all(torch.equal(worker.received[n], t) for n, t in expected.items()), f"round {round_}"
    rounds = ["/start_weight_update", "/update_weights", "/finish_weight_update", "/collective_rpc"]
    assert worker.calls == ["/init_weight_transfer_engine", *rounds, *rounds]
    transfer.close()
    assert worker.calls[-1] == "/shutdown_weight_transfer_engine" and transfer.engine is None
