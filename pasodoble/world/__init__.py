"""The embedded tiny world: a CPU-sized stand-in for real models and corpora (see DESIGN.md).

A byte-level BPE tokenizer with a Qwen chat template, tiny Qwen3 models in Hugging Face format, a seeded corpus of
arithmetic passages, an exact teacher for SFT data, held-out problems in four difficulty tiers, and the world's own
arithmetic (never Python `eval`). The SFT warm-up on it (`sft.tiny.ensure_sft_models`) builds the world and the
models once and caches them; recipes name the results `tiny:proposer` / `tiny:solver` (`sft.tiny.resolve_model`).

Usage:
    from pasodoble.world import WorldConfig, build_world
    paths = build_world(Path("runs/world"), WorldConfig())
"""

from pasodoble.world.build import WorldConfig, WorldPaths, build_world
from pasodoble.world.model import ModelConfig

__all__ = [
    "ModelConfig",
    "WorldConfig",
    "WorldPaths",
    "build_world",
]
