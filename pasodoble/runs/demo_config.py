"""The config of `pasodoble demo` (`DemoConfig`: the tiny world, the SFT warm-up, the short dual-play run and the
per-tier evaluation), read and checked without torch; `demo.py` runs it and re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pasodoble.errors import ConfigError
from pasodoble.sft.config import SFTConfig
from pasodoble.world.config import WorldConfig


@dataclass
class DemoEvalConfig:
    num_samples: int = 8  # sampled answers per problem (pass-rate band and avg@k)
    temperature: float = 1.0  # temperature of the sampled evaluation (greedy runs too)
    max_new_tokens: int = 192  # completion budget; the longest worked t4 answer takes 172 tokens
    problems_per_tier: int | None = None  # evaluate only the first N problems of each tier (None: all)
    batch_size: int = 128  # sequences per generate call
    seed: int = 0  # sampling seed

    def validate(self) -> None:
        if self.num_samples < 2:
            raise ConfigError("eval.num_samples", "must be at least 2 to measure pass rates, e.g. 8")
        if self.problems_per_tier is not None and self.problems_per_tier < 1:
            raise ConfigError("eval.problems_per_tier", "must be at least 1, or null for all")


@dataclass
class DemoDualPlayConfig:
    steps: int = 30  # online dual-play steps between SFT and evaluation (0: skip, evaluate the SFT Solver)
    recipe: str = "recipes/tiny-online.yaml"  # training recipe; world, sft and cache_dir come from the demo
    # dotted TrainConfig overrides, e.g. solver.lr=1e-4 (default: one torch thread, as the demo's SFT and evaluation)
    overrides: list[str] = field(default_factory=lambda: ["num_threads=1"])

    def validate(self) -> None:
        if self.steps < 0:
            raise ConfigError("dualplay.steps", "must be >= 0 (0 skips dual-play)")


@dataclass
class DemoConfig:
    world: WorldConfig = field(default_factory=WorldConfig)  # the tiny world (data, tokenizer, model size)
    sft: SFTConfig = field(default_factory=SFTConfig)  # the SFT warm-up of both roles
    dualplay: DemoDualPlayConfig = field(default_factory=DemoDualPlayConfig)  # the short RL run after SFT
    eval: DemoEvalConfig = field(default_factory=DemoEvalConfig)  # the per-tier Solver evaluation
    run_dir: str | None = None  # output directory (None: runs/demo-<date>-<time>)
    cache_dir: str | None = None  # SFT model cache (None: $PASODOBLE_CACHE, else ~/.cache/pasodoble)
    fresh: bool = False  # ignore the cache: build the world and SFT inside the run directory
