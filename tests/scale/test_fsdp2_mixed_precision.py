"""FSDP2's mixed precision for a bfloat16 role, on a one-rank gloo group in this process: the layers compute on
bfloat16 gathered weights, the shards (and so AdamW's step) stay float32, and the update takes the plain bfloat16
role's step within bfloat16's rounding; a float32 role gets no policy."""

from __future__ import annotations

import pytest
import torch

from pasodoble.scale.sharding.fsdp2 import FullyShard, mixed_precision
from tests.roles.test_roles import sampled
from tests.scale.test_sharding import one_rank_group, role_with  # noqa: F401


def test_only_a_bfloat16_role_gets_a_policy():
    assert mixed_precision(torch.float32) == {} and mixed_precision(None) == {}
    policy = mixed_precision(torch.bfloat16)["mp_policy"]
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32


def test_a_bfloat16_role_computes_on_bfloat16_gathers_and_steps_float32_shards(one_rank_group):  # noqa: F811
    sharded = role_with(FullyShard(1), dtype="bfloat16")
    plain = role_with(None, dtype="bfloat16")
    seen = []
    layer = sharded.model.model.layers[0]
    hook = layer.register_forward_pre_hook(lambda m, args: seen.append(m.mlp.up_proj.weight.dtype))
    samples, advantages = sampled(plain, ["a", "bb"], seed=0)
    a, b = sharded.update(samples, advantages), plain.update(samples, advantages)
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in sharded.model.parameters())  # the shards: float32 masters
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=0.05) and a["grad_norm"] > 0
    # Adam's first step moves each weight by about lr along its gradient's sign, so bfloat16 rounding shows as the
    # few weights whose near-zero gradient flipped sign; nearly all take the same step.
    weights, state = sharded.weights(), plain.model.state_dict()
    flipped = sum(int(((weights[k] - v).abs() > 5e-3).sum()) for k, v in state.items())
    assert flipped / sum(v.numel() for v in state.values()) < 0.02
