"""Packed update micro-batches: one padding-free row per micro-batch with the same log-probs and gradients as the
plain padded path, and the Role runs its update through it."""

from __future__ import annotations

import pytest
import torch

from pasodoble.core.grpo import token_logprobs
from pasodoble.core.packed import can_pack, pack, packed_logprobs, segment_mask
from pasodoble.roles.role import collate
from tests.test_shared_prefix import _grads, _samples


def test_pack_lays_out_each_prompt_once_and_drops_each_last_token():
    packed = pack([[7, 8], [9], [7, 8], [7, 8]], [[1, 2, 3], [4], [], [5, 6]])
    # a row per prompt: the prompt, then each sample without its last token (an empty one adds nothing)
    assert packed.input_ids == [[7, 8, 1, 2, 5], [9]]
    assert packed.position_ids == [[0, 1, 2, 3, 2], [0]]
    assert packed.segment == [[0, 0, 1, 1, 4], [0]]
    # token 0 from the prompt's last state, then each from the one before it
    assert packed.source == [(0, 1), (0, 2), (0, 3), (0, 1), (0, 4), (1, 0)]
    assert packed.target == [1, 2, 3, 5, 6, 4] and packed.sample == [0, 0, 0, 3, 3, 1]
    assert packed.column == [2, 3, 4, 2, 3, 1]
    with pytest.raises(ValueError, match="non-empty prompt"):
        pack([[]], [[1]])


def test_segment_mask_sees_own_prompt_and_own_completion_only():
    # row 0: p p c0 c0 c1; row 1: p c2 and three padding positions
    segment = torch.tensor([[0, 0, 1, 1, 2], [0, 3, -1, -1, -1]])
    mask = segment_mask(segment).int()
    assert mask.shape == (2, 1, 5, 5)
    assert mask[0, 0].tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 1, 0, 0, 1],  # sample 1 skips sample 0's tokens
    ]
    assert mask[1, 0].tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],  # padding sees only padding: never the prompt, never an empty row
        [0, 0, 1, 1, 0],
        [0, 0, 1, 1, 1],
    ]


@pytest.mark.parametrize("chunk_tokens", [1, 2048])
def test_values_and_gradients_equal_the_plain_path(tiny_lm, chunk_tokens):
    model, tokenizer, _ = tiny_lm
    assert can_pack(model)
    samples = _samples(len(tokenizer))
    batch = collate(samples, tokenizer.pad_token_id)
    weights = torch.randn(batch["input_ids"].shape, generator=torch.Generator().manual_seed(6))
    out = {}
    for name in ("plain", "packed"):
        model.zero_grad(set_to_none=True)
        if name == "plain":
            logps = token_logprobs(
                model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"], temperature=0.7
            )
        else:
            logps = packed_logprobs(
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
    (lp, grads), (lp2, grads2) = out["plain"], out["packed"]
    assert lp.shape == lp2.shape and (lp2 != 0).sum() == batch["completion_mask"].sum()
    torch.testing.assert_close(lp2, lp, atol=2e-6, rtol=1e-5)
    assert len(grads) == len(grads2) > 0
    for a, b in zip(grads, grads2):
        torch.testing.assert_close(b, a, atol=2e-6, rtol=1e-5)
    assert not model.get_output_embeddings().__dict__.get("forward")  # the head's forward is restored


def test_only_masked_attention_implementations_pack(tiny_lm):
    model, _, _ = tiny_lm
    kept = model.config._attn_implementation
    try:
        model.config._attn_implementation = "eager"  # would add a boolean mask to its scores
        assert not can_pack(model)
    finally:
        model.config._attn_implementation = kept
    assert can_pack(model) and not can_pack(torch.nn.Linear(2, 2))
