"""Rollout engines behind one interface (see `base.py`); the engines load on first use (`pasodoble.lazy`), so the
engine settings (`settings.py`) read without torch."""

from typing import TYPE_CHECKING

from pasodoble.lazy import lazy_exports

if TYPE_CHECKING:
    from pasodoble.rollout.base import Completion, RolloutEngine, SamplingParams
    from pasodoble.rollout.hf import HFEngine

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams"]
__getattr__ = lazy_exports(
    __name__,
    {
        "Completion": "pasodoble.rollout.base",
        "RolloutEngine": "pasodoble.rollout.base",
        "SamplingParams": "pasodoble.rollout.base",
        "HFEngine": "pasodoble.rollout.hf",
    },
)
