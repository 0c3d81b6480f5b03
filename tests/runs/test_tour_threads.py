"""The tour recipe runs at one torch thread: the compiled CPU kernels (decode, update attention, fused layers and
blocks) serve only one-thread runs, and on a 2-core machine the tour's step took 21.8 s at one thread against 305 s
at two (the same first step, paired, on a busy machine)."""

from __future__ import annotations

from pathlib import Path

from pasodoble.config import load_config
from pasodoble.runs.train import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_tour_recipe_uses_one_thread():
    cfg = load_config(TrainConfig, ROOT / "recipes" / "tiny-online.yaml", [])
    assert cfg.num_threads == 1
