"""The HF engine samples exactly what SamplingParams says: the full softmax(logits / T) when top_k / min_p are
off (no library default, no checkpoint generation_config), only the k most likely tokens with top_k, only tokens
above min_p x the top probability with min_p; and it reports log-probs of the untruncated distribution.

Each distribution test draws one token 4,000 times from a random 400-token Qwen3 and bounds the total-variation
distance to the expected distribution (`tests/rollout/distribution.py`; the vLLM engines' twin is
`tests/rollout/test_vllm_sampling.py`).
"""

from __future__ import annotations

import math

import pytest
from transformers import GenerationConfig

from pasodoble.rollout import HFEngine, SamplingParams
from tests.rollout.distribution import (
    DRAWS,
    PROMPT,
    TEMPERATURE,
    check_distribution,
    min_p_distribution,
    spread_lm,
    top_k_distribution,
    tv_bound,
)


@pytest.fixture(scope="module")
def lm():
    return spread_lm()


def draw(model, tokenizer, **sampling) -> list:
    engine = HFEngine(model, tokenizer, batch_size=DRAWS, logprob_batch_size=DRAWS)
    params = SamplingParams(n=DRAWS, temperature=TEMPERATURE, max_new_tokens=1, seed=0, **sampling)
    return engine.generate([PROMPT], params)[0]


def test_top_k_off_samples_the_full_softmax(lm):
    model, tokenizer, p = lm
    top50_mass = float(p.topk(50).values.sum())
    assert 1 - top50_mass > 2 * tv_bound(p)  # transformers' default top-50 would be far outside the bound
    for off in ({}, {"top_k": 0}, {"top_k": None, "min_p": 0.0}):
        distinct = check_distribution(draw(model, tokenizer, **off), p)
        assert len(distinct) > 250, len(distinct)


def test_checkpoint_generation_config_does_not_add_filters(lm):
    # generation_config.json of a chat checkpoint often carries its own sampling defaults
    model, tokenizer, p = lm
    saved = model.generation_config
    model.generation_config = GenerationConfig(
        do_sample=True, top_k=3, top_p=0.5, min_p=0.5, temperature=0.1, repetition_penalty=5.0, typical_p=0.2
    )
    try:
        check_distribution(draw(model, tokenizer), p)
        assert model.generation_config.top_k == 3  # restored after the call
    finally:
        model.generation_config = saved


def test_top_k_keeps_only_the_k_most_likely_tokens(lm):
    model, tokenizer, p = lm
    distinct = check_distribution(draw(model, tokenizer, top_k=5), top_k_distribution(p, 5))
    assert distinct <= set(p.topk(5).indices.tolist()) and len(distinct) == 5


def test_min_p_keeps_only_tokens_above_the_threshold(lm):
    model, tokenizer, p = lm
    keep = p >= 0.3 * p.max()
    assert 5 < int(keep.sum()) < 100  # the threshold really cuts
    distinct = check_distribution(draw(model, tokenizer, min_p=0.3), min_p_distribution(p, 0.3))
    assert all(bool(keep[t]) for t in distinct)


def test_reported_log_probs_are_of_the_untruncated_softmax(lm):
    model, tokenizer, p = lm
    for c in draw(model, tokenizer, top_k=5)[:200]:
        token = c.token_ids[0]
        assert c.logprobs[0] == pytest.approx(math.log(float(p[token])), abs=1e-4)
        assert c.logprobs[0] < math.log(float(p[token] / p.topk(5).values.sum()))  # not renormalised


@pytest.mark.parametrize(
    "bad",
    [
        {"top_k": -1},
        {"top_k": 2.5},
        {"top_k": True},
        {"min_p": 1.0},
        {"min_p": -0.1},
        {"min_p": float("nan")},
    ],
)
def test_sampling_params_reject_bad_top_k_and_min_p(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad)
