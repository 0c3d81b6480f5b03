"""Rewards of both roles: Solver correctness, pass rates, the Proposer's reward and the step-skip rule.

What: docs/METHOD.md steps 4, 5, 7, 9 and 10 as pure functions on plain values. The Proposer's reward is chosen by name
from `PROPOSER_REWARDS` ("pasodoble", and the peers "rzero" and "spice" for comparison runs).

Why: every threshold is a `RewardConfig` field whose default is the paper's value, so ablations are config edits and
the tests pin each formula on hand-computed numbers.

How to run: pure functions; `python -m pytest tests/core/test_rewards.py`.

Departures from the reference code: none in the default formula. The reference gives p = 1 a small positive
reward (1.1 - 1 + 0.2 d); that stays the default and `pass_rate_high` is the optional upper gate.
`solver_pass_rate_low` (an option, off by default) gives the Solver's learnable band its own floor. The random-reward
ablation draws from a seeded `random.Random` passed in, so all ranks draw the same rewards.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pasodoble.errors import ConfigError


@dataclass
class RewardConfig:
    proposer_reward: str = "pasodoble"  # name in PROPOSER_REWARDS: "pasodoble" | "rzero" | "spice"
    solver_reward: str = "correct"  # "correct" | "random" (ablation: Bernoulli(0.5) Solver reward)
    pass_rate_low: float = (
        0.2  # p <= this -> Proposer reward 0 (too hard or invalid); also the learnable band's floor
    )
    pass_rate_high: float | None = None  # p >= this -> Proposer reward 0 (None: off, the paper's behaviour)
    solver_pass_rate_low: float | None = None  # the Solver's own learnable floor (None: pass_rate_low)
    diversity_low: float = 0.3  # d <= this -> Proposer reward 0 (too repetitive)
    diversity_weight: float = 0.2  # weight of d in the Proposer reward
    difficulty_offset: float = 1.1  # r = offset - p + weight * d
    use_diversity: bool = True  # ablation: False drops the diversity gate and term

    def validate(self) -> None:
        if self.proposer_reward not in PROPOSER_REWARDS:
            names = ", ".join(sorted(PROPOSER_REWARDS))
            raise ConfigError(
                "rewards.proposer_reward", f"unknown {self.proposer_reward!r}; use one of {names}"
            )
        if self.solver_reward not in SOLVER_REWARDS:
            names = ", ".join(SOLVER_REWARDS)
            raise ConfigError("rewards.solver_reward", f"unknown {self.solver_reward!r}; use one of {names}")
        if not 0.0 <= self.pass_rate_low < 1.0:
            raise ConfigError("rewards.pass_rate_low", f"must be in [0, 1), got {self.pass_rate_low}")
        if self.solver_pass_rate_low is not None and not 0.0 <= self.solver_pass_rate_low < 1.0:
            raise ConfigError(
                "rewards.solver_pass_rate_low",
                f"must be in [0, 1) or null to follow pass_rate_low, got {self.solver_pass_rate_low}",
            )
        if self.pass_rate_high is not None and not self.pass_rate_low < self.pass_rate_high <= 1.0:
            raise ConfigError(
                "rewards.pass_rate_high",
                f"must be in (pass_rate_low, 1] or null to turn it off, got {self.pass_rate_high}",
            )
        if not 0.0 <= self.diversity_low < 1.0:
            raise ConfigError("rewards.diversity_low", f"must be in [0, 1), got {self.diversity_low}")
        if self.diversity_weight < 0:
            raise ConfigError("rewards.diversity_weight", f"must be >= 0, got {self.diversity_weight}")
        if not isinstance(self.use_diversity, bool):
            raise ConfigError("rewards.use_diversity", f"must be true or false, got {self.use_diversity!r}")


def pasodoble_reward(p: float, d: float, cfg: RewardConfig) -> float:
    """PasoDoble (docs/METHOD.md step 7): 0 if p <= low; 0 if d <= diversity_low; else offset - p + weight * d.

    With `pass_rate_high` set, p >= it also gives 0. With `use_diversity=False` the diversity gate and term are
    dropped: r = offset - p.
    """
    if p <= cfg.pass_rate_low:
        return 0.0
    if cfg.pass_rate_high is not None and p >= cfg.pass_rate_high:
        return 0.0
    if not cfg.use_diversity:
        return cfg.difficulty_offset - p
    if d <= cfg.diversity_low:
        return 0.0
    return cfg.difficulty_offset - p + cfg.diversity_weight * d


def rzero_reward(p: float, d: float, cfg: RewardConfig) -> float:
    """R-Zero's challenger reward min(p, 1 - p): highest at p = 0.5. Ignores d and the pass-rate gates."""
    return min(p, 1.0 - p)


def spice_reward(p: float, d: float, cfg: RewardConfig) -> float:
    """SPICE-style variance reward p (1 - p) of a Bernoulli pass rate. Ignores d and the pass-rate gates."""
    return p * (1.0 - p)


PROPOSER_REWARDS: dict[str, Callable[[float, float, RewardConfig], float]] = {
    "pasodoble": pasodoble_reward,
    "rzero": rzero_reward,
    "spice": spice_reward,
}
SOLVER_REWARDS = ("correct", "random")


def pass_rates(correct: Sequence[Sequence[bool]]) -> list[float]:
    """Per question, the fraction of correct Solver answers; a question with no answers has pass rate 0."""
    return [sum(bool(c) for c in row) / len(row) if len(row) else 0.0 for row in correct]


def proposer_rewards(
    pass_rates: Sequence[float], diversities: Sequence[float], valid: Sequence[bool], cfg: RewardConfig
) -> list[float]:
    """Proposer reward per question; an invalid question gets p := 0 (the validity gate), so reward 0."""
    if not len(pass_rates) == len(diversities) == len(valid):
        raise ValueError(
            f"pass_rates, diversities and valid differ in length: {len(pass_rates)}, {len(diversities)}, {len(valid)}"
        )
    reward = PROPOSER_REWARDS[cfg.proposer_reward]
    return [reward(p if ok else 0.0, d, cfg) for p, d, ok in zip(pass_rates, diversities, valid)]


def solver_rewards(
    correct: Sequence[Sequence[bool]],
    cfg: RewardConfig,
    rng: random.Random,
    *,
    answered: Sequence[Sequence[bool]] | None = None,
) -> list[list[float]]:
    """Solver reward per answer: 1.0 if correct else 0.0; "random" draws Bernoulli(0.5) instead.

    `answered` (same shape) marks answers that had an extractable final answer; the reference's random ablation
    gives 0 to the others, and so does this one when `answered` is given.
    """
    if cfg.solver_reward == "correct":
        return [[1.0 if c else 0.0 for c in row] for row in correct]
    if cfg.solver_reward != "random":
        raise ValueError(f"unknown solver_reward {cfg.solver_reward!r}")
    shape_of = answered if answered is not None else [[True] * len(row) for row in correct]
    return [[1.0 if ok and rng.random() < 0.5 else 0.0 for ok in row] for row in shape_of]


def learnable(p: float, cfg: RewardConfig) -> bool:
    """The Solver-update and buffer band floor < p < 1 (2..5 correct of 6 with the defaults).

    The floor is `solver_pass_rate_low` when set, else `pass_rate_low`: setting it to 0 lets the Solver learn from a
    question it solves once in J while the Proposer's reward keeps the paper's gate, so the Proposer is not paid
    for labels the Solver matches by chance.
    """
    floor = cfg.pass_rate_low if cfg.solver_pass_rate_low is None else cfg.solver_pass_rate_low
    return floor < p < 1.0


def skip_reason(
    pass_rates: Sequence[float],
    valid: Sequence[bool],
    proposer_advantages: Sequence[float],
    cfg: RewardConfig,
) -> str | None:
    """Why the whole step is skipped (docs/METHOD.md step 9), or None to train.

    "no_learnable_question": no valid question has pass_rate_low < p < 1;
    "zero_proposer_advantages": every Proposer advantage is 0 (nothing to learn from).
    """
    if not any(ok and learnable(p, cfg) for p, ok in zip(pass_rates, valid)):
        return "no_learnable_question"
    if all(a == 0 for a in proposer_advantages):
        return "zero_proposer_advantages"
    return None
