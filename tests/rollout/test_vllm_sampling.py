"""The vLLM engines sample what SamplingParams says, as the HF engine does (`tests/rollout/test_sampling.py`): the
full softmax(logits / T) with top_k / min_p off, only the k most likely tokens with top_k, only the tokens above
min_p x the top probability with min_p, and no filter from the checkpoint's generation_config.json.

4,000 single-token draws from the spread-out 400-token Qwen3 of `tests/rollout/distribution.py` (head_dim 32, the
CPU build's smallest), checked against the expected distribution by total-variation distance, through the
in-process engine (`engine: vllm`) and a server (`engine: vllm_server`). Marker `vllm`: run with `make test-vllm`.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]  # a server start takes 1-3 min on 2 cores

from pasodoble.rollout import SamplingParams  # noqa: E402
from pasodoble.rollout.placement import Placement  # noqa: E402
from pasodoble.rollout.settings import VLLMConfig  # noqa: E402
from pasodoble.rollout.vllm import VLLMEngine  # noqa: E402
from tests.rollout.distribution import (  # noqa: E402
    DRAWS,
    PROMPT,
    TEMPERATURE,
    check_distribution,
    min_p_distribution,
    spread_lm,
    top_k_distribution,
    tv_bound,
)


@pytest.fixture(scope="module", params=["vllm", "vllm_server"])
def world(request, tmp_path_factory):
    model, tokenizer, p = spread_lm(head_dim=32, heads=2, kv_heads=1, spread=6.0)
    path = tmp_path_factory.mktemp("vllm-spread")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # a chat checkpoint's own sampling defaults: the engine must not apply them
    (path / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "top_k": 3, "top_p": 0.5, "min_p": 0.5, "temperature": 0.1})
    )
    if request.param == "vllm":
        engine = VLLMEngine(VLLMConfig(), path, tokenizer, max_model_len=64)
    else:  # started the way a run starts its server
        role_cfg = SimpleNamespace(
            vllm=VLLMConfig(cpu_kvcache_space_gb=1), max_sequence_length=64, dtype="float32"
        )
        run_dir = tmp_path_factory.mktemp("run")
        engine = Placement(log_dir=str(run_dir)).server_engine("solver", role_cfg, path, tokenizer)
    try:
        yield engine, p
    finally:
        engine.close()


def draw(engine, **sampling) -> list:
    params = SamplingParams(n=DRAWS, temperature=TEMPERATURE, max_new_tokens=1, seed=0, **sampling)
    return engine.generate([PROMPT], params)[0]


def test_top_k_off_samples_the_full_softmax(world):
    engine, p = world
    hidden_top50_gap = 1 - float(p.topk(50).values.sum())  # a hidden top-50 would be far outside the bound
    assert hidden_top50_gap > 2 * tv_bound(p)
    for off in ({}, {"top_k": 0}, {"top_k": None, "min_p": 0.0}):
        completions = draw(engine, **off)
        assert len(completions) == DRAWS
        assert len(check_distribution(completions, p)) > 250
    for c in completions[:200]:  # log-probs of softmax(logits / T) itself
        assert c.logprobs[0] == pytest.approx(math.log(float(p[c.token_ids[0]])), abs=1e-3)


def test_top_k_keeps_only_the_k_most_likely_tokens(world):
    engine, p = world
    distinct = check_distribution(draw(engine, top_k=5), top_k_distribution(p, 5))
    assert distinct <= set(p.topk(5).indices.tolist()) and len(distinct) == 5


def test_min_p_keeps_only_tokens_above_the_threshold(world):
    engine, p = world
    keep = p >= 0.3 * p.max()
    assert 5 < int(keep.sum()) < 100  # the threshold really cuts
    distinct = check_distribution(draw(engine, min_p=0.3), min_p_distribution(p, 0.3))
    assert all(bool(keep[t]) for t in distinct)


def test_a_seed_repeats_its_draws_and_another_seed_does_not(world):
    engine, _ = world
    first = [c.token_ids[0] for c in draw(engine)[:200]]
    assert first == [c.token_ids[0] for c in draw(engine)[:200]]
    other = engine.generate(
        [PROMPT], SamplingParams(n=200, temperature=TEMPERATURE, max_new_tokens=1, seed=1)
    )
    assert first != [c.token_ids[0] for c in other[0]]
