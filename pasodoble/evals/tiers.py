"""Held-out tier problems as evaluation problems, so per-tier tables come from the evaluation harness.

Why: the demo, the dual-play loop's periodic evaluation and any ablation score the Solver per tier with
`pasodoble.evals.evaluate`; this turns `tiers.jsonl` rows into `Problem`s whose `source` is the tier name.

`held_out_problems` draws the same problems straight from the split, as many as asked (the world's `tiers.jsonl`
is their start): the experiment uses it to evaluate on more problems than the world stores, without rebuilding it.

Usage: `evaluate(engine, tok, load_tier_problems(paths.tiers), settings, grader).per_source["t3"]`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from pasodoble.evals.problems import Problem
from pasodoble.io import read_jsonl
from pasodoble.world import problems as tier_problems


def load_tier_problems(tiers_path: Path, per_tier: int | None = None) -> list[Problem]:
    """Problems of `tiers.jsonl` (source = tier name), optionally only the first `per_tier` of each tier."""
    counts: dict[str, int] = defaultdict(int)
    problems = []
    for row in read_jsonl(tiers_path):
        counts[row["tier"]] += 1
        if per_tier is None or counts[row["tier"]] <= per_tier:
            problems.append(
                Problem(id=row["id"], question=row["question"], answers=(row["answer"],), source=row["tier"])
            )
    return problems


def held_out_problems(world_seed: int, per_tier: int) -> list[Problem]:
    """Up to `per_tier` held-out problems of every tier (fewer where a tier has fewer: t2 holds 173)."""
    return [
        Problem(id=f"{tier}-{i:04d}", question=question, answers=(str(answer),), source=tier)
        for tier in tier_problems.TIERS
        for i, (question, answer) in enumerate(
            tier_problems.held_out(tier, per_tier, world_seed, at_most=True)
        )
    ]
