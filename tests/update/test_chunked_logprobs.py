"""Chunked log-probs: the same values, entropies and gradients as `update.logprobs.logprobs`, and the Role uses them."""

from __future__ import annotations

import pytest
import torch

from pasodoble.update.chunked_logprobs import chunked_token_logprobs, supports_chunking
from pasodoble.update.logprobs import logprobs


def _batch(vocab: int):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, vocab, (3, 11), generator=gen)
    attention = torch.ones(3, 11, dtype=torch.long)
    attention[1, :4] = 0  # left padding, as the rollout engine's batches
    attention[2, 8:] = 0  # right padding, as the update's
    completion = torch.zeros(3, 11)
    completion[0, 5:] = 1
    completion[1, 6:] = 1
    completion[2, 3:8] = 1
    return ids, attention, completion


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("chunk_tokens", [1, 4, 2048])
def test_values_entropy_and_gradients_equal_the_plain_path(tiny_lm, chunk_tokens):
    model, tokenizer, _ = tiny_lm
    ids, attention, completion = _batch(len(tokenizer))
    weights = torch.randn(3, 11, generator=torch.Generator().manual_seed(4))
    out = {}
    for name, fn in (("plain", logprobs), ("chunked", chunked_token_logprobs)):
        model.zero_grad(set_to_none=True)
        kwargs = {"chunk_tokens": chunk_tokens} if name == "chunked" else {}
        logps, entropy = fn(model, ids, attention, completion, temperature=0.7, return_entropy=True, **kwargs)
        (logps * weights).sum().backward()
        out[name] = (logps.detach(), entropy, _grads(model))
    model.zero_grad(set_to_none=True)
    (lp, ent, grads), (lp2, ent2, grads2) = out["plain"], out["chunked"]
    torch.testing.assert_close(lp2, lp, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ent2, ent, atol=1e-6, rtol=1e-5)
    assert len(grads) == len(grads2) > 0
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    assert not model.get_output_embeddings().__dict__.get("forward")  # the head's forward is restored


def test_no_completion_tokens_gives_zeros_with_a_graph(tiny_lm):
    model, tokenizer, _ = tiny_lm
    ids, attention, _ = _batch(len(tokenizer))
    logps = chunked_token_logprobs(model, ids, attention, torch.zeros(3, 11))
    assert logps.shape == (3, 11) and not logps.any() and logps.requires_grad


def test_models_that_scale_their_logits_keep_the_plain_path(tiny_lm):
    model, _, _ = tiny_lm
    assert supports_chunking(model)
    model.config.final_logit_softcapping = 30.0
    try:
        assert not supports_chunking(model)
    finally:
        del model.config.final_logit_softcapping
    assert not supports_chunking(torch.nn.Linear(2, 2))


def test_role_update_is_the_same_with_and_without_chunks():
    from tests.roles.test_roles import make_role, sampled

    # prompts unshared, so the chunked path is the one compared (tests/update/test_shared_prefix.py covers sharing)
    chunked = make_role(logprob_chunk_tokens=5, share_prompt_prefill=False)
    plain = make_role(logprob_chunk_tokens=None, share_prompt_prefill=False)
    samples, adv = sampled(chunked, ["1+1", "2+2"])
    a, b = chunked.update(samples, adv), plain.update(samples, adv)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-7)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for x, y in zip(chunked.model.parameters(), plain.model.parameters()):
        # AdamW at lr 1e-2 turns the rounding of a ~0 gradient into a step of up to lr; the chunks' fused head
        # rounds the softmax another way than the plain path (as close to float64: tests/update/test_fused_head.py)
        torch.testing.assert_close(x, y, atol=5e-5, rtol=0)


def test_chunk_size_is_validated():
    from pasodoble.errors import ConfigError
    from pasodoble.roles.role import RoleConfig

    with pytest.raises(ConfigError, match="logprob_chunk_tokens"):
        RoleConfig(logprob_chunk_tokens=0).validate()
