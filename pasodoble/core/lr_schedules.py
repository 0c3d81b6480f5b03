"""Learning-rate schedules: constant, linear and cosine, each with an optional linear warm-up.

Why here and not `transformers.get_scheduler`: importing that function loads `transformers.trainer_utils`, which
imports peft whenever it is installed. A role without LoRA never uses peft, and that import alone held about 40 MB
of resident memory for the whole run (15-24 MB of the tiny anchor's step peak, docs/PERFORMANCE.md). These factors
are the same formulas as transformers 5.x's (a test compares them step by step), and the scheduler is the same
`torch.optim.lr_scheduler.LambdaLR`, so a checkpoint's scheduler state reads the same either way.

`constant`, `linear` and `cosine` give the multiplier of the base learning rate at optimizer step `step` (0 first);
`build(...)` returns the scheduler.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SCHEDULES = ("constant", "linear", "cosine")


def constant(step: int, *, warmup_steps: int) -> float:
    """Up from 0 over the warm-up, then 1."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    return 1.0


def linear(step: int, *, warmup_steps: int, total_steps: int) -> float:
    """Up from 0 over the warm-up, then down to 0 at `total_steps`."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    return max(0.0, float(total_steps - step) / float(max(1, total_steps - warmup_steps)))


def cosine(step: int, *, warmup_steps: int, total_steps: int) -> float:
    """Up from 0 over the warm-up, then half a cosine period down to 0 at `total_steps`."""
    if step < warmup_steps:
        return float(step) / float(max(1, warmup_steps))
    progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def build(
    name: str, optimizer: torch.optim.Optimizer, *, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The `name` schedule (one of SCHEDULES) over `total_steps` optimizer steps, `warmup_steps` of them warm-up."""
    if name == "constant":
        factor = partial(constant, warmup_steps=warmup_steps)
    elif name == "linear":
        factor = partial(linear, warmup_steps=warmup_steps, total_steps=total_steps)
    elif name == "cosine":
        factor = partial(cosine, warmup_steps=warmup_steps, total_steps=total_steps)
    else:
        raise ValueError(f"unknown learning-rate schedule {name!r}; use one of {SCHEDULES}")
    import torch  # here, not above: a config check reads SCHEDULES before torch is imported

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
