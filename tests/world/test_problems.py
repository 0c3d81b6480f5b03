"""Tiers, the held-out split, and the samplers used by SFT data and the oracle control."""

from __future__ import annotations

import random

import pytest

from pasodoble.errors import ConfigError
from pasodoble.world import arith, problems


@pytest.mark.parametrize(("tier", "operands"), [("t1", 2), ("t2", 2), ("t3", 3), ("t4", 4)])
def test_tier_shapes(tier, operands):
    rng = random.Random(0)
    for _ in range(50):
        expr = problems.sample_expr(tier, rng)
        assert len(expr.operands) == operands
        assert arith.solve(expr.question) == expr.answer
        assert expr.question.startswith("What is ") and expr.question.endswith("?")


def test_held_out_is_distinct_and_on_the_held_out_side():
    for tier in problems.TIERS:
        rows = problems.held_out(tier, 50, seed=3)
        assert len({q for q, _ in rows}) == 50
        assert all(problems.is_held_out(q) and arith.solve(q) == a for q, a in rows)


def test_generate_never_returns_held_out_problems():
    for tier in problems.TIERS:
        rows = problems.generate(tier, 300, seed=1)
        assert len(rows) == 300
        assert not any(problems.is_held_out(q) for q, _ in rows)
        assert all(arith.solve(q) == a for q, a in rows)


def test_samplers_are_deterministic():
    assert problems.generate("t3", 20, seed=5) == problems.generate("t3", 20, seed=5)
    assert problems.generate("t3", 20, seed=5) != problems.generate("t3", 20, seed=6)
    assert problems.held_out("t1", 20, seed=5) == problems.held_out("t1", 20, seed=5)


def test_bad_requests_are_config_errors():
    with pytest.raises(ConfigError, match="unknown tier"):
        problems.generate("t9", 1, seed=0)
    with pytest.raises(ConfigError, match="tier_size"):
        problems.held_out("t2", 500, seed=0)  # t2 has 720 questions, about 180 held-out
