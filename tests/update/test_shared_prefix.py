"""Shared prompt prefill in the update: the same log-probs and gradients as the plain path, and the Role uses it."""

from __future__ import annotations

import pytest
import torch

from pasodoble.roles.role import Sample, collate
from pasodoble.rollout import Completion
from pasodoble.update.logprobs import logprobs
from pasodoble.update.shared_prefix import can_share_prompts, distinct_prompts, shared_prompt_logprobs


def _samples(vocab: int) -> list[Sample]:
    """Two groups of different prompt lengths, completions of different lengths (one empty), a lone prompt."""
    gen = torch.Generator().manual_seed(5)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=gen).tolist()

    long, short, lone = ids(9), ids(4), ids(6)
    lengths = [(long, 5), (long, 7), (long, 0), (short, 3), (short, 7), (short, 1), (lone, 4)]
    return [Sample(p, Completion("", ids(c), [0.0] * c, "stop")) for p, c in lengths]


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_distinct_prompts_keep_first_seen_order():
    assert distinct_prompts([[1, 2], [3], [1, 2], [3], [4]]) == ([[1, 2], [3], [4]], [0, 1, 0, 1, 2])


def assert_same_as_plain(model, tokenizer, run, chunk_tokens: int) -> None:
    """`run` (shared_prompt_logprobs' signature) gives the plain path's log-probs and parameter gradients."""
    samples = _samples(len(tokenizer))
    batch = collate(samples, tokenizer.pad_token_id)
    weights = torch.randn(batch["input_ids"].shape, generator=torch.Generator().manual_seed(6))
    out = {}
    for name in ("plain", "other"):
        model.zero_grad(set_to_none=True)
        if name == "plain":
            logps = logprobs(
                model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"], temperature=0.7
            )
        else:
            logps = run(
                model,
                [s.prompt_ids for s in samples],
                [s.completion.token_ids for s in samples],
                batch["input_ids"].shape[1],
                pad_id=tokenizer.pad_token_id,
                temperature=0.7,
                chunk_tokens=chunk_tokens,
            )
        (logps * weights).sum().backward()
        out[name] = (logps.detach(), _grads(model))
    model.zero_grad(set_to_none=True)
    (lp, grads), (lp2, grads2) = out["plain"], out["other"]
    assert lp.shape == lp2.shape and (lp2 != 0).sum() == batch["completion_mask"].sum()
    torch.testing.assert_close(lp2, lp, atol=2e-6, rtol=1e-5)
    assert len(grads) == len(grads2) > 0
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(b, a, atol=2e-6, rtol=1e-5)
    assert not model.get_output_embeddings().__dict__.get("forward")  # the head's forward is restored


@pytest.mark.parametrize("chunk_tokens", [1, 2048])
def test_values_and_gradients_equal_the_plain_path(tiny_lm, chunk_tokens):
    model, tokenizer, _ = tiny_lm
    assert_same_as_plain(model, tokenizer, shared_prompt_logprobs, chunk_tokens)


def test_sliding_window_models_are_not_shared(tiny_lm):
    model, _, _ = tiny_lm
    assert can_share_prompts(model)
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    try:
        assert not can_share_prompts(model)
    finally:
        model.config.layer_types = ["full_attention"] * model.config.num_hidden_layers
    assert not can_share_prompts(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("loss_type", ["dr_grpo", "grpo", "dapo"])
def test_role_update_is_the_same_with_and_without_sharing(loss_type):
    from tests.roles.test_roles import make_role, sampled

    shared = make_role(share_prompt_prefill=True, loss_type=loss_type, micro_batch_size=4)
    plain = make_role(share_prompt_prefill=False, loss_type=loss_type, micro_batch_size=4)
    samples, adv = sampled(shared, ["1+1", "2+2", "33*3"])
    for _ in range(2):  # the second update's samples are a step old: ratios != 1 on both paths
        a, b = shared.update(samples, adv), plain.update(samples, adv)
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        for x, y in zip(shared.model.parameters(), plain.model.parameters()):
            torch.testing.assert_close(x, y, atol=2e-5, rtol=0)  # AdamW at lr 1e-2 magnifies ~0 gradients
