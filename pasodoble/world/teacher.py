"""The programmatic teacher: writes Proposer and Solver SFT examples in the formats real models use.

Why: the paper's cold start uses a strong teacher model's outputs, kept only when a checker agrees. In the tiny
world the teacher is exact (the world's own arithmetic writes the worked steps and the answer), so no filtering is
needed. Examples come mostly from the easy tiers, plus a small share of the next tier so that tier starts with a
pass rate above zero: RL cannot learn from a pass rate of exactly 0.

Every example is `{"prompt": <user message content>, "completion": <assistant text>}`; all questions are drawn from
the training side of the held-out split (`problems.sample_train`).
"""

from __future__ import annotations

import random

from pasodoble.world import arith, formats
from pasodoble.world.corpus import passage_for, worked_passage
from pasodoble.world.problems import Expr, sample_train


def worked_steps(expr: Expr) -> list[str]:
    """The column-method steps for an expression, checked against the world's parser."""
    lines = arith.steps(list(expr.operands), list(expr.ops))
    final = int(lines[-1].rsplit("so ", 1)[1].rstrip("."))
    if final != expr.answer:
        raise AssertionError(f"steps disagree with the parser on {expr.question}: {final} != {expr.answer}")
    return lines


def pick_tier(mix: dict[str, float], rng: random.Random) -> str:
    """A tier drawn with the given weights."""
    tiers = sorted(mix)
    return rng.choices(tiers, weights=[mix[t] for t in tiers])[0]


def solver_example(expr: Expr) -> dict[str, str]:
    """Question -> worked steps -> boxed answer."""
    return {
        "prompt": formats.solver_prompt(expr.question),
        "completion": formats.solver_completion(worked_steps(expr), expr.answer),
    }


def proposer_example(
    expr: Expr, rng: random.Random, passages: str = "numbers", answer: str = "worked"
) -> dict[str, str]:
    """Passage -> `<problem>` with the question, `<answer>` with worked steps (or none) and the boxed answer.

    `passages`: "numbers" (a fact sheet holding the expression's numbers) or "worked" (the solved expression itself).
    `answer`: "worked" (steps, then the boxed answer) or "copied" (the boxed answer alone).
    """
    passage = worked_passage(expr) if passages == "worked" else passage_for(expr, rng)
    steps = worked_steps(expr) if answer == "worked" else []
    return {
        "prompt": formats.proposer_prompt(passage),
        "completion": formats.proposer_completion(expr.question, steps, expr.answer),
    }


def solver_examples(n: int, mix: dict[str, float], rng: random.Random) -> list[dict[str, str]]:
    """`n` Solver SFT examples with tiers drawn from `mix`."""
    return [solver_example(sample_train(pick_tier(mix, rng), rng)) for _ in range(n)]


def proposer_examples(
    n: int, mix: dict[str, float], rng: random.Random, passages: str = "numbers", answer: str = "worked"
) -> list[dict[str, str]]:
    """`n` Proposer SFT examples with the question's tier drawn from `mix` (kinds: `proposer_example`)."""
    return [proposer_example(sample_train(pick_tier(mix, rng), rng), rng, passages, answer) for _ in range(n)]
