"""Label verification and label noise for a step's valid proposals, on any domain that can check a label.

What: `LabelConfig` (the recipe's `labels:` section) switches the check on (`check: true`: a valid proposal whose
label the domain proves wrong becomes invalid with reason `wrong_label`) and injects label noise for experiments
(`noise: p`: each valid proposal's label is replaced, with probability p, by a wrong integer). `label_step`
does both in that order and returns the step's `proposer/label/...` metrics, measured BEFORE the check (so a run
with the check off measures its own label noise):
    proposer/label/checkable   share of valid proposals whose label the domain could check
    proposer/label/correct     share of the checkable ones whose label was right
    proposer/label/noised      share of valid proposals whose label the injected noise replaced
    proposer/operands/<n>      share of checkable questions with n int literals (the tiny world's tier mix)
(a share whose denominator is 0 that step is not logged).

Why: a Proposer that copies a wrong value rewards the Solver for agreeing with it; the paper verifies its cold
start's labels only. The noise knob draws the curve of gain against label accuracy (docs/EXPERIMENTS.md).
Noise is seeded by (run seed, step), so a resumed run draws the same corrupted labels.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass

from pasodoble.core.prompts import Proposal
from pasodoble.domains.label_check import operand_count
from pasodoble.errors import ConfigError

WRONG_LABEL = "wrong_label"


@dataclass
class LabelConfig:
    check: bool = False  # reject a valid proposal whose label the domain proves wrong (reason wrong_label)
    noise: float = (
        0.0  # experiments only: probability that a valid proposal's label is replaced by a wrong one
    )

    def validate(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise ConfigError("labels.noise", "must be in [0, 1] (0: labels as the Proposer wrote them)")


def _wrong_label(answer: str, rng: random.Random) -> str:
    """An integer label that differs from `answer` (off by 1-10 where the answer is an int)."""
    offset = rng.choice([-1, 1]) * rng.randint(1, 10)
    try:
        return str(int(answer.strip()) + offset)
    except ValueError:
        return str(rng.randint(10, 999))


def label_step(
    domain, proposals: list[Proposal], cfg: LabelConfig, rng: random.Random
) -> tuple[list[Proposal], dict[str, float]]:
    """Noise, measure, then (if on) check the labels of the valid proposals; returns them and the metrics."""
    out, noised = list(proposals), 0
    valid = [i for i, p in enumerate(out) if p.invalid_reason is None]
    if cfg.noise > 0:
        for i in valid:
            if rng.random() < cfg.noise:
                out[i] = dataclasses.replace(out[i], answer=_wrong_label(out[i].answer, rng))
                noised += 1
    # A domain without `check_label` (code, QA, a toy domain) has no checkable labels.
    check = getattr(domain, "check_label", None)
    verdicts = {i: check(out[i].question, out[i].answer) if check else None for i in valid}
    checked = [v for v in verdicts.values() if v is not None]
    operands = Counter(
        n for i in valid if verdicts[i] is not None and (n := operand_count(out[i].question)) is not None
    )
    # A share with nothing to count is left out, not logged as 0, so means over steps stay unbiased.
    metrics = {}
    if valid:
        metrics["proposer/label/checkable"] = len(checked) / len(valid)
        metrics["proposer/label/noised"] = noised / len(valid)
    if checked:
        metrics["proposer/label/correct"] = sum(checked) / len(checked)
        metrics |= {f"proposer/operands/{n}": c / len(checked) for n, c in sorted(operands.items())}
    if cfg.check:
        for i, verdict in verdicts.items():
            if verdict is False:
                out[i] = dataclasses.replace(out[i], invalid_reason=WRONG_LABEL)
    return out, metrics
