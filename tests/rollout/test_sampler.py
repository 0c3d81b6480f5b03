"""Inverse-CDF token draws: the right distribution across blocks, never a zero-probability token."""

from __future__ import annotations

import math

import pytest
import torch

from pasodoble.rollout.sampler import BLOCK, InverseCdfSampler, draw_rows


# extra: a padded last block, or blocks that fit (no padding); scale: a softmax, or unnormalised weights as the
# decode loop passes them
@pytest.mark.parametrize("extra", [0, BLOCK - 17])
@pytest.mark.parametrize("scale", [1.0, 1e-6, 3e4])
def test_draws_follow_each_row_distribution_and_skip_zeros(extra, scale):
    torch.manual_seed(0)
    vocab, draws = 3 * BLOCK + 17 + extra, 40_000  # several blocks
    p = torch.rand(2, vocab) ** 4
    p[0, ::3] = 0.0  # a third of the tokens impossible, in every block
    p[1, : 2 * BLOCK] = 0.0  # whole blocks impossible
    p[1, -1] = 5.0  # the last block's last real token carries most of the mass
    p = p / p.sum(-1, keepdim=True)
    counts = torch.zeros_like(p)
    for _ in range(draws // 1000):
        idx = draw_rows((p * scale).repeat_interleave(1000, dim=0)).view(2, 1000)
        for row in range(2):
            counts[row] += torch.bincount(idx[row], minlength=vocab).float()
    assert counts[p == 0].sum() == 0
    freq = counts / draws
    for row in range(2):
        # E[TV] <= sum_i sqrt(p_i (1 - p_i) / N) / 2, plus McDiarmid's deviation for a 1e-9 chance
        bound = (p[row] * (1 - p[row]) / draws).sqrt().sum() / 2 + math.sqrt(math.log(1e9) / (2 * draws))
        assert (freq[row] - p[row]).abs().sum() / 2 < bound


def test_the_sampler_leaves_one_token_that_top_k_allows():
    torch.manual_seed(1)
    scores = torch.randn(64, 1000)
    out = InverseCdfSampler(0.7, top_k=5, top_p=1.0, min_p=None)(torch.zeros(64, 1, dtype=torch.long), scores)
    winners = out.argmax(-1)
    assert ((out == 0).sum(-1) == 1).all() and torch.isinf(out).sum() == 64 * 999
    top5 = scores.topk(5, dim=-1).indices
    assert (top5 == winners[:, None]).any(-1).all()


@pytest.mark.parametrize("top_k", [None, 5])
def test_drawing_from_raw_scores_and_from_scaled_ones_with_their_weights_is_one_draw(top_k):
    torch.manual_seed(3)
    scores = torch.randn(64, 1000) * 4
    sampler = InverseCdfSampler(0.7, top_k=top_k, top_p=1.0, min_p=None)
    torch.manual_seed(11)
    raw = sampler.draw(scores)
    scaled = scores / 0.7
    weights = (scaled - scaled.amax(-1, keepdim=True)).exp()
    torch.manual_seed(11)
    assert sampler.draw_scaled(scaled, weights).tolist() == raw.tolist()
    if top_k:  # the weights of the whole vocabulary are not the truncated distribution's: unused
        assert (scaled.topk(top_k, dim=-1).indices == raw[:, None]).any(-1).all()
