"""The HF engine samples exactly what SamplingParams says: the full softmax(logits / T) when top_k / min_p are
off (no library default, no checkpoint generation_config), only the k most likely tokens with top_k, only tokens
above min_p x the top probability with min_p; and it reports log-probs of the untruncated distribution.

Each distribution test draws one token 4,000 times from a random 400-token Qwen3 and bounds the total-variation
distance to the expected distribution: E[TV] <= sum_i sqrt(p_i (1 - p_i) / N) / 2, and TV moves by at most 1/N per
draw, so (McDiarmid) TV exceeds that plus sqrt(ln(1e9) / 2N) with probability below 1e-9.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from pasodoble.rollout import HFEngine, SamplingParams

VOCAB, DRAWS, TEMPERATURE = 400, 4000, 0.8
PROMPT = [5, 17, 42, 9]


@pytest.fixture(scope="module")
def lm():
    """(model, tokenizer, p): a 400-token random Qwen3 whose next-token logits after PROMPT have a standard deviation of ~1,
    and p = softmax(those logits / TEMPERATURE)."""
    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=False,
        eos_token_id=1,
        pad_token_id=0,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)  # std 0.02 gives near-uniform logits; this spreads them (std ~1)
        logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1].float()
    return model, tokenizer, torch.softmax(logits / TEMPERATURE, -1)


def draw(model, tokenizer, **sampling) -> list:
    engine = HFEngine(model, tokenizer, batch_size=DRAWS, logprob_batch_size=DRAWS)
    params = SamplingParams(n=DRAWS, temperature=TEMPERATURE, max_new_tokens=1, seed=0, **sampling)
    return engine.generate([PROMPT], params)[0]


def tv_bound(p: torch.Tensor) -> float:
    return float((p * (1 - p) / DRAWS).sqrt().sum() / 2) + math.sqrt(math.log(1e9) / (2 * DRAWS))


def check_distribution(completions, p: torch.Tensor) -> set[int]:
    """Asserts the draws follow p (TV bound above); returns the distinct tokens drawn."""
    counts = Counter(c.token_ids[0] for c in completions)
    empirical = torch.zeros_like(p)
    for token, count in counts.items():
        empirical[token] = count / DRAWS
    tv = float((empirical - p).abs().sum() / 2)
    assert tv < tv_bound(p), (tv, tv_bound(p))
    return set(counts)


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
    top = p.topk(5).indices
    truncated = torch.zeros_like(p)
    truncated[top] = p[top] / p[top].sum()
    distinct = check_distribution(draw(model, tokenizer, top_k=5), truncated)
    assert distinct <= set(top.tolist()) and len(distinct) == 5


def test_min_p_keeps_only_tokens_above_the_threshold(lm):
    model, tokenizer, p = lm
    keep = p >= 0.3 * p.max()
    assert 5 < int(keep.sum()) < 100  # the threshold really cuts
    distinct = check_distribution(draw(model, tokenizer, min_p=0.3), torch.where(keep, p, 0) / p[keep].sum())
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
