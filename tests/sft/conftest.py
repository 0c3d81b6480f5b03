"""Fixtures of the cold-start tests: a tiny-world model that writes parseable proposals and often solves them.

The world is the tiny world reduced to t1 sums (two-digit A + B) with the default model size, SFT-warmed for 600
steps: its Proposer outputs parse and about half of its questions are answered right by the same model, so a
target of a few kept examples is reached in a few passages. It is built once (about two minutes on one core) into
the shared model cache (`$PASODOBLE_CACHE`, else ~/.cache/pasodoble) and reused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pasodoble.sft import SFTConfig
from pasodoble.sft.tiny import ensure_sft_models
from pasodoble.world import WorldConfig
from pasodoble.world.model import ModelConfig

COLD_WORLD = replace(
    WorldConfig.minimal(),
    model=ModelConfig(),
    sft_solver_examples=2000,
    sft_proposer_examples=600,
    sft_tiers=["t1"],
    sft_tier_weights=None,
    next_tier=None,
    bridge_share=0.0,
)
COLD_SFT = SFTConfig(max_steps=600, batch_size=16, warmup_steps=10, lr=5e-3, num_threads=1)
TINY_PROMPTS = {
    "proposer_template": "{passage}\nWrite a problem.",
    "proposer_template_no_passage": "Write a problem.",
    "solver_template": "{question}",
}


@pytest.fixture(scope="session")
def cold_models():
    """(model folder, corpus path) of the warmed t1 world."""
    models = ensure_sft_models(None, COLD_WORLD, COLD_SFT, progress=False)
    return Path(models.proposer_dir), Path(models.world.corpus)
