"""Rollout engines behind one interface (see `base.py`)."""

from pasodoble.rollout.base import Completion, RolloutEngine, SamplingParams
from pasodoble.rollout.hf import HFEngine, sequence_logprobs

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams", "sequence_logprobs"]
