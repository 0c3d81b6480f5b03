"""The samples of one prompt share its prefill in the Hugging Face engine: same samples and log-probs, fewer FLOPs."""

from __future__ import annotations

import pytest
import torch

from pasodoble.rollout import HFEngine, SamplingParams


def _prompts(tokenizer) -> list[list[int]]:
    chats = [[{"role": "user", "content": t}] for t in ("What is 2+3?", "Hi", "Name three primes below 20.")]
    out = []
    for chat in chats:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True)
        out.append(list(ids["input_ids"]) if hasattr(ids, "keys") else list(ids))
    return out + [[out[0][-1]]]  # a one-token prompt: its prefill row is all padding


def _prefill_tokens(model) -> list[int]:
    """Input tokens of every forward pass whose input is wider than one column (prefills, not decode steps)."""
    seen: list[int] = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] > 1:
            seen.append(ids.numel())

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(n=4, temperature=0.8, max_new_tokens=12, seed=3),
        SamplingParams(n=3, temperature=1.0, top_k=5, max_new_tokens=12, seed=4),
        SamplingParams(n=1, temperature=0.0, max_new_tokens=12),
    ],
)
def test_sharing_gives_the_same_samples_and_logprobs(tiny_lm, sampling):
    model, tokenizer, _ = tiny_lm
    prompts = _prompts(tokenizer)
    shared = HFEngine(model, tokenizer, batch_size=8).generate(prompts, sampling)
    plain = HFEngine(model, tokenizer, batch_size=8, share_prefill=False).generate(prompts, sampling)
    flat_shared, flat_plain = [c for g in shared for c in g], [c for g in plain for c in g]
    assert len(flat_shared) == len(prompts) * sampling.n
    for a, b in zip(flat_shared, flat_plain, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=2e-5, rtol=1e-5)


def test_each_distinct_prompt_is_prefilled_once(tiny_lm):
    model, tokenizer, _ = tiny_lm
    prompts = _prompts(tokenizer)[:2]
    width = max(len(p) for p in prompts)
    sampling = SamplingParams(n=4, temperature=1.0, max_new_tokens=4, seed=0)
    engine = HFEngine(model, tokenizer, batch_size=8)
    seen = _prefill_tokens(model)
    engine.generate(prompts, sampling)
    assert seen == [2 * (width - 1)]  # two distinct prompts, all but the last column; generate runs that one
    seen.clear()
    HFEngine(model, tokenizer, batch_size=8, share_prefill=False).generate(prompts, sampling)
    assert seen == [8 * width]
