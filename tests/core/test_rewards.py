"""Rewards: every formula and gate of docs/METHOD.md steps 4, 5, 7, 9, 10 on hand-computed values."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from pasodoble.core.rewards import (
    PROPOSER_REWARDS,
    RewardConfig,
    learnable,
    pass_rates,
    proposer_rewards,
    skip_reason,
    solver_rewards,
)
from pasodoble.errors import ConfigError

CFG = RewardConfig()


def test_defaults_are_the_papers_values():
    assert (CFG.pass_rate_low, CFG.pass_rate_high, CFG.diversity_low) == (0.2, None, 0.3)
    assert (CFG.diversity_weight, CFG.difficulty_offset, CFG.use_diversity) == (0.2, 1.1, True)
    assert (CFG.proposer_reward, CFG.solver_reward) == ("pasodoble", "correct")


def test_pass_rates_hand_computed():
    correct = [[True, True, False, False, False, False], [True] * 6, [False] * 6, []]
    # 2/6, 6/6, 0/6, and no answers at all counts as nothing solved
    assert pass_rates(correct) == pytest.approx([0.333333, 1.0, 0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize(
    ("p", "d", "expected"),
    [
        (0.5, 1.0, 0.8),  # 1.1 - 0.5 + 0.2 * 1.0
        (0.2, 1.0, 0.0),  # p <= 0.2: too hard
        (0.0, 1.0, 0.0),
        (1.0, 1.0, 0.3),  # 1.1 - 1.0 + 0.2 * 1.0: the reference rewards p = 1 a little
        (0.5, 0.3, 0.0),  # d <= 0.3: too repetitive
        (0.5, 0.31, 0.662),  # 1.1 - 0.5 + 0.2 * 0.31 = 0.6 + 0.062
        (0.5, 0.5, 0.7),  # 1.1 - 0.5 + 0.1
        (0.8333333, 1.0, 0.4666667),  # 5 of 6 correct: 1.1 - 0.8333333 + 0.2
        (0.3333333, 0.5, 0.8666667),  # 2 of 6 correct: 1.1 - 0.3333333 + 0.1
    ],
)
def test_pasodoble_reward(p, d, expected):
    assert proposer_rewards([p], [d], [True], CFG) == pytest.approx([expected], abs=1e-6)


def test_invalid_question_gets_zero_whatever_its_pass_rate():
    assert proposer_rewards([0.5, 0.5], [1.0, 1.0], [False, True], CFG) == pytest.approx([0.0, 0.8])


def test_upper_gate_option():
    cfg = RewardConfig(pass_rate_high=1.0)
    assert proposer_rewards([1.0, 0.5], [1.0, 1.0], [True, True], cfg) == pytest.approx([0.0, 0.8])
    cfg = RewardConfig(pass_rate_high=0.8)
    assert proposer_rewards([0.8333333], [1.0], [True], cfg) == [0.0]


def test_no_diversity_ablation_drops_gate_and_term():
    cfg = RewardConfig(use_diversity=False)
    # 1.1 - 0.5 = 0.6 even with d = 0 (the gate is off); the pass-rate gate stays
    assert proposer_rewards([0.5, 0.5, 0.2], [0.0, 1.0, 1.0], [True] * 3, cfg) == pytest.approx(
        [0.6, 0.6, 0.0]
    )


def test_peer_rewards_by_name():
    rzero, spice = PROPOSER_REWARDS["rzero"], PROPOSER_REWARDS["spice"]
    assert rzero(0.5, 0.0, CFG) == 0.5  # min(0.5, 0.5)
    assert rzero(1 / 6, 0.0, CFG) == pytest.approx(0.1666667, abs=1e-6)  # min(1/6, 5/6)
    assert rzero(5 / 6, 0.0, CFG) == pytest.approx(0.1666667, abs=1e-6)  # min(5/6, 1/6)
    assert spice(0.5, 0.0, CFG) == 0.25  # 0.5 * 0.5
    assert spice(1 / 3, 0.0, CFG) == pytest.approx(0.2222222, abs=1e-6)  # 1/3 * 2/3 = 2/9
    cfg = RewardConfig(proposer_reward="rzero")
    # the validity gate is shared: invalid -> p := 0 -> min(0, 1) = 0
    assert proposer_rewards([0.5, 0.5], [0.0, 0.0], [True, False], cfg) == [0.5, 0.0]


def test_proposer_rewards_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        proposer_rewards([0.5], [1.0, 1.0], [True], CFG)


def test_solver_rewards_correct():
    out = solver_rewards([[True, False], [False]], CFG, random.Random(0))
    assert out == [[1.0, 0.0], [0.0]]


def test_solver_rewards_random_is_seeded_bernoulli_half():
    cfg = RewardConfig(solver_reward="random")
    correct = [[True] * 6 for _ in range(200)]
    a = solver_rewards(correct, cfg, random.Random(7))
    b = solver_rewards(correct, cfg, random.Random(7))
    assert a == b  # same seed on every rank -> same rewards
    flat = [r for row in a for r in row]
    assert set(flat) == {0.0, 1.0}
    assert 0.45 < sum(flat) / len(flat) < 0.55  # 1200 fair coin flips
    unanswered = solver_rewards([[True, True]], cfg, random.Random(0), answered=[[False, False]])
    assert unanswered == [[0.0, 0.0]]


@pytest.mark.parametrize(
    ("p", "expected"), [(0.2, False), (2 / 6, True), (5 / 6, True), (1.0, False), (0.0, False)]
)
def test_learnable_band(p, expected):
    assert learnable(p, CFG) is expected


def test_solver_floor_widens_only_the_solver_band():
    cfg = replace(CFG, solver_pass_rate_low=0.0)
    assert learnable(1 / 6, cfg) and not learnable(1 / 6, CFG) and not learnable(0.0, cfg)
    assert proposer_rewards([1 / 6], [1.0], [True], cfg) == [0.0]  # the Proposer keeps the paper's 0.2 gate
    assert skip_reason([1 / 6, 0.0], [True, True], [0.7, -0.7], cfg) is None  # a 1-of-6 question is learnable
    with pytest.raises(ConfigError, match="solver_pass_rate_low"):
        replace(CFG, solver_pass_rate_low=1.0).validate()


def test_skip_reasons():
    # no question with 0.2 < p < 1: skip
    assert skip_reason([0.0, 1.0, 0.1666667], [True] * 3, [0.5, -0.5, 0.0], CFG) == "no_learnable_question"
    # a learnable pass rate on an invalid question does not count
    assert skip_reason([0.5], [False], [1.0], CFG) == "no_learnable_question"
    assert skip_reason([0.5, 0.5], [True, True], [0.0, 0.0], CFG) == "zero_proposer_advantages"
    assert skip_reason([0.5, 0.0], [True, True], [0.7, -0.7], CFG) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("proposer_reward", "nope"),
        ("solver_reward", "nope"),
        ("pass_rate_low", 1.0),
        ("pass_rate_high", 0.1),
        ("diversity_low", -0.1),
        ("diversity_weight", -1.0),
        ("use_diversity", "yes"),
    ],
)
def test_validate_names_the_field(field, value):
    cfg = RewardConfig(**{field: value})
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    assert err.value.where == f"rewards.{field}"


def test_validate_accepts_defaults():
    RewardConfig().validate()
    RewardConfig(pass_rate_high=1.0, proposer_reward="spice", solver_reward="random").validate()
