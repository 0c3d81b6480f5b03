"""Packed update micro-batches: one padding-free row per micro-batch with the same log-probs and gradients as the
plain padded path, and the Role runs its update through it."""

from __future__ import annotations

import pytest
import torch

from pasodoble.update.packed import can_pack, pack, packed_logprobs, segment_mask
from tests.update.test_shared_prefix import assert_same_as_plain


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


def test_pack_lays_every_group_out_in_one_row_with_line():
    packed = pack([[7, 8], [9], [7, 8], [7, 8]], [[1, 2, 3], [4, 6], [], [5, 6]], line=True)
    # the groups one after another: [7 8 | 1 2 | 5] then [9 | 4], no padding between them
    assert packed.input_ids == [[7, 8, 1, 2, 5, 9, 4]]
    assert packed.position_ids == [[0, 1, 2, 3, 2, 0, 1]]
    assert packed.segment == [[0, 0, 1, 1, 4, 0, 2]]
    # sample 1's first token from its prompt's last state, column 5, then from its own token at column 6
    assert packed.source == [(0, 1), (0, 2), (0, 3), (0, 1), (0, 4), (0, 5), (0, 6)]
    assert packed.target == [1, 2, 3, 5, 6, 4, 6] and packed.sample == [0, 0, 0, 3, 3, 1, 1]
    assert packed.column == [2, 3, 4, 2, 3, 1, 2]


def test_segment_mask_keeps_each_group_of_a_row_to_itself():
    # one row, two groups: p p a | q b, then padding
    mask = segment_mask(torch.tensor([[0, 0, 1, 0, 2, -1]])).int()
    assert mask[0, 0].tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 0, 0],  # the second prompt sees neither the first group's prompt nor its sample
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ]


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
    assert_same_as_plain(model, tokenizer, packed_logprobs, chunk_tokens)


def test_only_masked_attention_implementations_pack(tiny_lm):
    model, _, _ = tiny_lm
    kept = model.config._attn_implementation
    try:
        model.config._attn_implementation = "eager"  # would add a boolean mask to its scores
        assert not can_pack(model)
    finally:
        model.config._attn_implementation = kept
    assert can_pack(model) and not can_pack(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_packed_role_update_equals_the_plain_one(checkpointing):
    from tests.roles.test_roles import make_role, sampled

    packed = make_role(gradient_checkpointing=checkpointing, micro_batch_size=8)
    packed.entry_weight = 0.0  # price positions only: the packed rows win
    plain = make_role(share_prompt_prefill=False, micro_batch_size=8)
    samples, adv = sampled(packed, ["1+1", "2+2", "33*3"])
    assert packed.micro_batch_layout(samples)[1] and not plain.micro_batch_layout(samples)[1]
    for _ in range(2):  # the second update's samples are a step old: ratios != 1 on both paths
        a, b = packed.update(samples, adv), plain.update(samples, adv)
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        for x, y in zip(packed.model.parameters(), plain.model.parameters()):
            torch.testing.assert_close(x, y, atol=2e-5, rtol=0)
