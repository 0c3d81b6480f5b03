"""Rollout engines behind one interface (see `base.py`)."""

from pasodoble.rollout.base import Completion, RolloutEngine, SamplingParams
from pasodoble.rollout.hf import HFEngine

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams"]
