"""The embedded tiny world: a CPU-sized stand-in for real models and corpora (see DESIGN.md).

A byte-level BPE tokenizer with a Qwen chat template, tiny Qwen3 models in Hugging Face format, a seeded corpus of
arithmetic passages, an exact teacher for SFT data, held-out problems in four difficulty tiers, and the world's own
arithmetic (never Python `eval`). The SFT warm-up on it (`sft.tiny.ensure_sft_models`) builds the world and the
models once and caches them; recipes name the results `tiny:proposer` / `tiny:solver` (`sft.tiny.resolve_model`).
The config (`config.py`) reads without torch; the names below load on first use (`pasodoble.lazy`).

Usage:
    from pasodoble.world import WorldConfig, build_world
    paths = build_world(Path("runs/world"), WorldConfig())
"""

from typing import TYPE_CHECKING

from pasodoble.lazy import lazy_exports

if TYPE_CHECKING:
    from pasodoble.world.build import WorldPaths, build_world
    from pasodoble.world.config import ModelConfig, WorldConfig

__all__ = [
    "ModelConfig",
    "WorldConfig",
    "WorldPaths",
    "build_world",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "ModelConfig": "pasodoble.world.config",
        "WorldConfig": "pasodoble.world.config",
        "WorldPaths": "pasodoble.world.build",
        "build_world": "pasodoble.world.build",
    },
)
