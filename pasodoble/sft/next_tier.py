"""The SFT warm-up's stop rule at work: every few steps the Solver answers fresh questions of each tier greedily,
and training stops at the first check where the next tier is within reach.

The rule, its settings and why it exists are in `world.select` (`SelectConfig`); this module runs it as a
`train_sft` callback (`NextTierStop`), prompting as the evaluation prompts (`evals.runner.render_prompt`).
"""

from __future__ import annotations

import logging

import torch

from pasodoble.core.prompts import last_boxed
from pasodoble.evals.runner import EvalSettings, render_prompt
from pasodoble.rollout import HFEngine, SamplingParams
from pasodoble.world import formats
from pasodoble.world.select import SelectConfig, dev_questions

log = logging.getLogger("pasodoble.world")


def greedy_accuracy(model, tokenizer, questions: list[tuple[str, int]], max_new_tokens: int) -> float:
    """Share of `questions` whose greedy answer's last `\\boxed{}` is the true answer."""
    settings = EvalSettings(prompt_template=formats.SOLVER_TEMPLATE)  # the evaluation's own prompt
    ids = [render_prompt(q, settings, tokenizer)[1] for q, _ in questions]
    engine = HFEngine(model, tokenizer, batch_size=len(ids))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = engine.generate(ids, SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens))
    finally:
        model.train(was_training)
    right = sum(
        (last_boxed(c[0].text) or "").strip() == str(answer) for c, (_, answer) in zip(out, questions)
    )
    return right / len(questions)


class NextTierStop:
    """`train_sft` callback: True (stop) at the first check where the next tier is within reach."""

    def __init__(
        self, model, tokenizer, config: SelectConfig, sft_tiers, next_tier, sft_prompts, seed, tracker
    ):
        self.model, self.tokenizer, self.config, self.tracker = model, tokenizer, config, tracker
        self.sft_tiers, self.next_tier = list(sft_tiers), next_tier
        tiers = [*self.sft_tiers, *([next_tier] if next_tier else [])]
        self.dev = {
            t: dev_questions(t, config.dev_problems, f"dev/{seed}", sft_prompts if t == next_tier else set())
            for t in tiers
        }
        self.checks: list[dict] = []
        self.stopped_at: int | None = None

    @property
    def rule(self) -> str | None:
        """The rule in words (shown by `train_sft`); None when no check is made."""
        c = self.config
        if not c.every:
            return None
        reach = f" and {self.next_tier} >= {c.next_tier_acc:.2f}" if self.next_tier else ""
        return f"SFT tiers >= {c.min_sft_acc:.2f}{reach} greedy, checked every {c.every} steps from {c.start}"

    def met(self, scores: dict[str, float]) -> bool:
        sft_ok = all(scores[t] >= self.config.min_sft_acc for t in self.sft_tiers)
        return sft_ok and (self.next_tier is None or scores[self.next_tier] >= self.config.next_tier_acc)

    def __call__(self, step: int) -> bool:
        c = self.config
        if not c.every or step < c.start or (step - c.start) % c.every:
            return False
        scores = {
            t: greedy_accuracy(self.model, self.tokenizer, qs, c.max_new_tokens) for t, qs in self.dev.items()
        }
        self.checks.append({"step": step, **scores})
        if self.tracker is not None:
            self.tracker.log({f"sft_select/dev_{t}": v for t, v in scores.items()}, step=step)
        if self.met(scores):
            self.stopped_at = step
            return True
        return False

    def report(self, max_steps: int) -> dict:
        """What `select.json` holds; warns when the cap was reached without meeting the rule."""
        if self.config.every and self.stopped_at is None:
            last = self.checks[-1] if self.checks else {}
            log.warning(
                "SFT start: the rule (SFT tiers >= %.2f, %s >= %.2f on dev questions) was not met in %d steps "
                "(last check: %s); the last weights are kept. Raise sft.max_steps or lower world.select.next_tier_acc.",
                self.config.min_sft_acc,
                self.next_tier,
                self.config.next_tier_acc,
                max_steps,
                last,
            )
        return {
            "rule": {
                "min_sft_acc": self.config.min_sft_acc,
                "next_tier_acc": self.config.next_tier_acc,
                "sft_tiers": self.sft_tiers,
                "next_tier": self.next_tier,
            },
            "stopped_at": self.stopped_at,
            "steps_trained": self.stopped_at or max_steps,
            "checks": self.checks,
        }
