"""Difficulty tiers of the tiny world: expression shapes, a fixed held-out split, and samplers.

Tiers (numbers: `A`, `B` two-digit 10-99, `d`, `e` one-digit 2-9):
    t1  A + B                      two-digit sum
    t2  A * d                      two-digit by one-digit product
    t3  A + B * d  |  B * d + A     three operands, precedence
    t4  A * d + B * e  |  A + B * d + C   four operands

SFT data may also hold `t1b` (A + C, C three-digit; training only, never evaluated): the addition a t3 problem ends
with, so t3 is a composition of two skills the Solver was taught, and starts above a pass rate of zero.

Why a hash split: every question belongs for good either to the held-out side or to the training side (a stable
hash of its text), so held-out tier problems never appear in SFT data or in `generate()`, whatever the seeds and
sizes. A quarter of each tier's questions are held-out candidates (t2 has 720 questions; the hash split keeps
173 of them).

Usage: `generate("t3", 64, seed=1)` -> fresh (question, answer) pairs from the training side, for the oracle
control; `held_out("t1", 100, seed=0)` -> the evaluation problems.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from pasodoble.errors import ConfigError
from pasodoble.world import arith

TIERS = ("t1", "t2", "t3", "t4")
TIER_DESCRIPTIONS = {
    "t1": "A + B (two-digit sum)",
    "t2": "A * d (two-digit by one-digit product)",
    "t3": "A + B * d (three operands)",
    "t4": "A * d + B * e, A + B * d + C (four operands)",
}
BRIDGE = "t1b"  # training-only sums of a two- and a three-digit number: the second step of a t3 problem
HELD_OUT_SHARE = 4  # one question in HELD_OUT_SHARE is a held-out candidate
_MAX_TRIES = 200  # per requested problem, before giving up on a too-small partition


@dataclass(frozen=True)
class Expr:
    """A `+`/`*` expression: `operands[0] ops[0] operands[1] ...`."""

    operands: tuple[int, ...]
    ops: tuple[str, ...]

    @property
    def question(self) -> str:
        parts = [str(self.operands[0])]
        for op, value in zip(self.ops, self.operands[1:]):
            parts += [op, str(value)]
        return f"What is {' '.join(parts)}?"

    @property
    def answer(self) -> int:
        value = arith.solve(self.question)
        if value is None:  # every Expr is well formed by construction
            raise ValueError(f"malformed expression {self}")
        return value


def _two(rng: random.Random) -> int:
    return rng.randint(10, 99)


def _one(rng: random.Random) -> int:
    return rng.randint(2, 9)


def sample_expr(tier: str, rng: random.Random) -> Expr:
    """One expression of `tier`, from either side of the split."""
    if tier == "t1":
        return Expr((_two(rng), _two(rng)), ("+",))
    if tier == "t2":
        return Expr((_two(rng), _one(rng)), ("*",))
    if tier == BRIDGE:
        a, c = _two(rng), rng.randint(100, 999)
        return Expr((a, c), ("+",)) if rng.random() < 0.5 else Expr((c, a), ("+",))
    if tier == "t3":
        a, b, d = _two(rng), _two(rng), _one(rng)
        return Expr((a, b, d), ("+", "*")) if rng.random() < 0.5 else Expr((b, d, a), ("*", "+"))
    if tier == "t4":
        if rng.random() < 0.5:
            return Expr((_two(rng), _one(rng), _two(rng), _one(rng)), ("*", "+", "*"))
        return Expr((_two(rng), _two(rng), _one(rng), _two(rng)), ("+", "*", "+"))
    raise ConfigError("tier", f"unknown tier {tier!r}; use one of {', '.join(TIERS)} (or {BRIDGE})")


def is_held_out(question: str) -> bool:
    """Whether a question text is on the held-out side of the split (stable across runs and machines)."""
    digest = hashlib.blake2b(question.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % HELD_OUT_SHARE == 0


def sample_train(tier: str, rng: random.Random) -> Expr:
    """One expression of `tier` from the training side of the split."""
    for _ in range(_MAX_TRIES):
        expr = sample_expr(tier, rng)
        if not is_held_out(expr.question):
            return expr
    raise RuntimeError(f"no training-side expression of {tier} found")  # cannot happen: 3/4 of each tier


def generate(tier: str, n: int, seed: int) -> list[tuple[str, int]]:
    """`n` fresh (question, true answer) pairs of `tier`, never one of the held-out problems (may repeat)."""
    rng = random.Random(f"generate/{tier}/{seed}")
    return [(e.question, e.answer) for e in (sample_train(tier, rng) for _ in range(n))]


def held_out(tier: str, n: int, seed: int, *, at_most: bool = False) -> list[tuple[str, int]]:
    """`n` distinct held-out (question, true answer) pairs of `tier` (`at_most`: fewer if the tier has fewer).

    The list for a larger `n` starts with the list for a smaller one (same seed), so the world's `tiers.jsonl`
    is the start of any longer evaluation set.
    """
    rng = random.Random(f"held_out/{tier}/{seed}")
    seen: dict[str, int] = {}
    for _ in range(n * _MAX_TRIES):
        if len(seen) == n:
            break
        expr = sample_expr(tier, rng)
        if is_held_out(expr.question) and expr.question not in seen:
            seen[expr.question] = expr.answer
    if len(seen) < n and not at_most:
        raise ConfigError(
            "world.tier_size", f"tier {tier} has only {len(seen)} held-out problems; ask for fewer"
        )
    return list(seen.items())
