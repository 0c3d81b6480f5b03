"""When the tiny world's SFT warm-up stops: at the first check where the next tier is within the Solver's reach.

Why: dual-play learns from questions the Solver solves sometimes (pass rate in (0.2, 1), docs/METHOD.md step 10), so the
tiny world's SFT start must know its SFT tiers and have half-learned the tier above them. That tier is learned in a
jump: its accuracy stays near 0 while the SFT tiers are still being learned, then rises from a few percent to 70%+
in about 100 steps. When the jump happens depends on the data order (`sft.seed`) and on float rounding, so a fixed
step count ends some runs before the jump (t3 at 1%) and others after it. Measured on the default world (800
steps, cosine schedule; greedy t1/t2/t3 on the held-out problems at step 700): `sft.seed=0` 100/95/73, `sft.seed=1`
79/86/1, while another machine saw the reverse (seed 0 88/78/2, seed 1 100/91/57 at step 800).

How: every `every` steps from `start` on, the model answers `dev_problems` questions of each SFT tier and of the
next tier greedily, all from the training side of the split, so no held-out evaluation problem is used: the SFT
tiers' questions may be SFT examples (the check measures the fit; t2 has only 540 training-side questions, all of
them in the SFT data), the next tier's are not (its check measures reach, not recall); training stops at the first check where every SFT tier scores at least
`min_sft_acc` and the next tier at least `next_tier_acc`, else at `sft.max_steps` (which becomes a cap), with a
warning that names the numbers. Each check is logged (`sft_select/*` rows) and the outcome is written to
`select.json` beside the models. A check is 150 greedy answers, prompted as the evaluation prompts them.

Departures: none from the method; this is how the tiny world picks its start, as one picks a base model whose
benchmark is neither solved nor out of reach. `every: 0` turns it off (train `sft.max_steps`, keep the last weights).

Here: the rule's settings (`SelectConfig`, part of the world's config) and the questions a check asks; the check
itself runs in the SFT warm-up (`sft.next_tier.NextTierStop`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pasodoble.errors import ConfigError
from pasodoble.world import problems


@dataclass
class SelectConfig:
    every: int = 50  # steps between checks (0: off; train sft.max_steps and keep the last weights)
    start: int = 300  # first step checked (earlier the SFT tiers are far from their floor)
    dev_problems: int = 50  # fresh questions per checked tier
    min_sft_acc: float = 0.95  # greedy accuracy every SFT tier must reach
    next_tier_acc: float = 0.5  # greedy accuracy of the next tier at which training stops
    max_new_tokens: int = 160  # answer budget of a check (worked t3 answers take about 100 tokens)

    def validate(self) -> None:
        if self.every < 0 or self.start < 0:
            raise ConfigError("world.select.every", "every and start must be >= 0 (every: 0 turns it off)")
        if self.every and self.dev_problems < 1:
            raise ConfigError("world.select.dev_problems", "must be at least 1, e.g. 50")
        for name in ("min_sft_acc", "next_tier_acc"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"world.select.{name}", "must be in [0, 1], e.g. 0.5")


def dev_questions(tier: str, n: int, seed: int, exclude: set[str]) -> list[tuple[str, int]]:
    """`n` training-side questions of `tier` that are not in `exclude` (the SFT prompts); fewer if the tier runs out."""
    picked: dict[str, int] = {}
    for question, answer in problems.generate(tier, 20 * n, seed=seed):
        if question not in exclude and question not in picked:
            picked[question] = answer
            if len(picked) == n:
                break
    return list(picked.items())
