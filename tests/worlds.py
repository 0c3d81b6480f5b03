"""The tiny worlds the tests share (see tests/conftest.py's `tiny_world` fixtures): their overrides and budget."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_BUDGET_S = 1800  # pytest-timeout of a module whose first test may build a tiny world (setup included)
VLLM_WORLD = [
    "world.model.head_dim=32",
    "world.select.every=0",
    "sft.max_steps=800",
    "world.next_tier_share=0.14",
]  # the default world with 32-wide heads (vLLM's CPU kernels) and the earlier 800-step SFT start


def recipe_world(overrides: list[str]):
    """The cached models of recipes/tiny-online.yaml's world under `overrides`, built first if missing."""
    from pasodoble.config import load_config
    from pasodoble.runs.train import TrainConfig, _tiny_models

    recipe = ROOT / "recipes" / "tiny-online.yaml"
    return _tiny_models(load_config(TrainConfig, recipe, [*overrides, "logging.quiet=true"]))


if __name__ == "__main__":
    # `python -m tests.worlds`: build the default and the vLLM tiny worlds into the model cache ahead of the tests
    # (.ci/run starts it in the background while the first stages use one core). A test needing a world that is
    # still being built waits on the cache entry's lock and then finds it.
    import time

    for name, overrides in (("default", []), ("vLLM", VLLM_WORLD)):
        began = time.monotonic()
        recipe_world(overrides)
        print(f"tests.worlds: the {name} tiny world is ready ({time.monotonic() - began:.0f} s)", flush=True)
