"""Evaluation sets of the tiny world drawn fresh by an evaluation seed, with a dev split kept apart for tuning.

What: the held-out side of the world's hash split (`problems.is_held_out`: never in the corpus, the SFT data or
`generate()`) is cut once more by a second stable hash into `dev` (a quarter) and `test` (the rest).
`evaluation_set(tier, n, eval_seed, split)` draws `n` distinct problems of one split (None: all of it), in an order
set by the evaluation seed; `evaluation_problems(sizes, eval_seed, split)` does so for every tier as `Problem`s
(source = tier). Tuning (a learning-rate pilot) reads `dev`; reported figures read `test`.

Why: the world's own `tiers.jsonl` (100 problems a tier, fixed) can only see a change of about 20 points; the
experiment needs more problems (t3 800, t4 300, t1 200, t2 all of its test side) and a dev split that no reported
figure shares. Tiers with few questions (t1: 8,100; t2: 720) are enumerated, larger ones sampled.

Usage: `evaluation_problems({"t3": 800, "t2": None}, eval_seed=1, split="test")`.
"""

from __future__ import annotations

import hashlib
import itertools
import random

from pasodoble.errors import ConfigError
from pasodoble.evals import Problem
from pasodoble.world.problems import TIERS, Expr, is_held_out, sample_expr

SPLITS = ("dev", "test")
DEV_SHARE = 4  # one held-out question in DEV_SHARE is a dev question
_MAX_TRIES = 400  # draws per requested problem before a tier counts as exhausted


def split_of(question: str) -> str | None:
    """'dev' or 'test' for a held-out question; None for one on the training side."""
    if not is_held_out(question):
        return None
    digest = hashlib.blake2b(b"dev-split/" + question.encode(), digest_size=8).digest()
    return "dev" if int.from_bytes(digest, "big") % DEV_SHARE == 0 else "test"


def _enumerated(tier: str) -> list[Expr] | None:
    """Every expression of a small tier, in a fixed order (None for the tiers too large to list)."""
    two, one = range(10, 100), range(2, 10)
    if tier == "t1":
        return [Expr((a, b), ("+",)) for a, b in itertools.product(two, two)]
    if tier == "t2":
        return [Expr((a, d), ("*",)) for a, d in itertools.product(two, one)]
    return None


def evaluation_set(tier: str, n: int | None, eval_seed: int, split: str = "test") -> list[tuple[str, int]]:
    """Up to `n` distinct (question, answer) pairs of `tier` in `split` (None: all; only enumerable tiers)."""
    if split not in SPLITS:
        raise ConfigError("split", f"unknown {split!r}; use dev or test")
    rng = random.Random(f"eval/{split}/{tier}/{eval_seed}")
    listed = _enumerated(tier)
    if listed is not None:
        pool = [e for e in listed if split_of(e.question) == split]
        rng.shuffle(pool)
        return [(e.question, e.answer) for e in pool[:n]]
    if n is None:
        raise ConfigError(f"eval sizes.{tier}", "give a number: this tier is too large to use all of it")
    seen: dict[str, int] = {}
    for _ in range(n * _MAX_TRIES):
        if len(seen) == n:
            break
        expr = sample_expr(tier, rng)
        if expr.question not in seen and split_of(expr.question) == split:
            seen[expr.question] = expr.answer
    return list(seen.items())


def evaluation_problems(sizes: dict[str, int | None], eval_seed: int, split: str = "test") -> list[Problem]:
    """Every tier of `sizes` (tier -> n or None) as Problems, ids `<tier>-<split>-<i>`."""
    unknown = sorted(set(sizes) - set(TIERS))
    if unknown:
        raise ConfigError("eval sizes", f"unknown tiers {unknown}; use {', '.join(TIERS)}")
    return [
        Problem(id=f"{tier}-{split}-{i:04d}", question=q, answers=(str(a),), source=tier)
        for tier in TIERS
        if tier in sizes
        for i, (q, a) in enumerate(evaluation_set(tier, sizes[tier], eval_seed, split))
    ]
