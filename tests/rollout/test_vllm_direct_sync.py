"""The direct weight load of the in-process vLLM engine (`vllm.weight_sync: direct`): the trainer's tensors go into
the worker's layer-wise reload with no file; outputs after it equal those after the /dev/shm reload. Marker `vllm`
(the CPU build: `make test-vllm`)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from pasodoble.rollout import SamplingParams  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from tests.loop_helpers import make_tokenizer  # noqa: E402
from tests.rollout.test_vllm_engine import _max_gap, _model, _prompts  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from pasodoble.rollout.vllm import VLLMEngine

    tokenizer = make_tokenizer()
    model = _model(tokenizer)
    path = tmp_path_factory.mktemp("direct-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    made = {
        how: VLLMEngine(
            VLLMConfig(weight_sync=how, enable_prefix_caching=True), path, tokenizer, max_model_len=128
        )
        for how in ("direct", "shm")
    }
    yield model, tokenizer, made
    for engine in made.values():
        engine.close()


def sample(engine, prompts, greedy: bool):
    params = SamplingParams(
        n=1 if greedy else 3, temperature=0.0 if greedy else 1.0, max_new_tokens=12, seed=7
    )
    return [[(c.token_ids, c.logprobs) for c in g] for g in engine.generate(prompts, params)]


def test_outputs_after_a_direct_load_equal_outputs_after_the_shm_reload(engines):
    model, tokenizer, made = engines
    direct, shm = made["direct"], made["shm"]
    assert direct.direct and not shm.direct
    prompts = _prompts(tokenizer)
    before = sample(direct, prompts, greedy=True)
    with torch.no_grad():  # a trained step's worth of change, embedding (and so the tied head) included
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    direct.update_weights(model)
    shm.update_weights(model)
    for greedy in (True, False):
        a, b = sample(direct, prompts, greedy), sample(shm, prompts, greedy)
        for ga, gb in zip(a, b, strict=True):
            for (ids_a, lp_a), (ids_b, lp_b) in zip(ga, gb, strict=True):
                assert ids_a == ids_b
                assert max(abs(x - y) for x, y in zip(lp_a, lp_b)) < TOL
    assert sample(direct, prompts, greedy=True) != before  # the load changed what the engine serves


def test_the_direct_load_serves_the_trainers_log_probs(engines):
    model, tokenizer, made = engines
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)  # the tied head must follow the embedding
    made["direct"].update_weights(model)
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=3)
    assert _max_gap(model, made["direct"], _prompts(tokenizer), sampling) < TOL


def test_load_direct_refuses_an_engine_with_a_child_core(engines):
    model, _, made = engines
    with pytest.raises(RuntimeError, match="weight_sync=direct"):
        made["shm"].load_direct(model)


def test_a_second_in_process_engine_beside_the_first(engines, tmp_path):
    """Dual play holds two in-process engines (one a role) in one process: both start, load and sample."""
    from pasodoble.rollout.vllm import VLLMEngine

    model, tokenizer, made = engines
    path = tmp_path / "second"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    second = VLLMEngine(VLLMConfig(weight_sync="direct"), path, tokenizer, max_model_len=128)
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p), alpha=0.05)
        second.update_weights(model)
        made["shm"].update_weights(model)
        prompts = _prompts(tokenizer)
        assert sample(second, prompts, greedy=False) == sample(made["shm"], prompts, greedy=False)
        assert sample(made["direct"], prompts, greedy=True)  # the first in-process engine still serves
    finally:
        second.close()
