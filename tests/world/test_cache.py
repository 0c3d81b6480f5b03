"""ensure_sft_models: built once per config (atomic), reused after; `tiny:` specs."""

from __future__ import annotations

import threading

import pytest
from transformers import AutoModelForCausalLM

from pasodoble.errors import UserError
from pasodoble.io import build_lock, current_umask, read_jsonl
from pasodoble.sft import SFTConfig
from pasodoble.sft.tiny import (
    _build,
    cache_key,
    default_cache_dir,
    ensure_sft_models,
    resolve_model,
)
from pasodoble.world import WorldConfig


def test_built_once_then_reused(tmp_path):
    world, sft = WorldConfig.minimal(), SFTConfig(max_steps=2, batch_size=8, log_every=1, num_threads=None)
    models = ensure_sft_models(tmp_path, world, sft, progress=False)
    assert models.proposer_dir == models.solver_dir == tmp_path / cache_key(world, sft) / "sft"
    assert AutoModelForCausalLM.from_pretrained(models.solver_dir) is not None
    assert [r["step"] for r in read_jsonl(models.sft_metrics)] == [1, 2]
    assert models.world.tiers.is_file()
    assert models.solver_dir.parent.stat().st_mode & 0o777 == 0o777 & ~current_umask()  # readable by the team
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [f".lock-{cache_key(world, sft)}", cache_key(world, sft)]  # no temp dir left behind
    stamp = (models.solver_dir / "model.safetensors").stat().st_mtime_ns
    assert ensure_sft_models(tmp_path, world, sft, progress=False) == models
    assert (models.solver_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_separate_roles_get_their_own_models(tmp_path):
    sft = SFTConfig(max_steps=1, batch_size=8, roles="separate", num_threads=None)
    models = ensure_sft_models(tmp_path, WorldConfig.minimal(), sft, progress=False)
    assert models.proposer_dir.name == "proposer" and models.solver_dir.name == "solver"
    assert {r["step"] for r in read_jsonl(models.sft_metrics)} == {1}
    assert {k for r in read_jsonl(models.sft_metrics) for k in r} >= {"proposer/sft/loss", "solver/sft/loss"}


def test_key_depends_on_both_configs():
    base = cache_key(WorldConfig(), SFTConfig())
    assert cache_key(WorldConfig(seed=1), SFTConfig()) != base
    assert cache_key(WorldConfig(), SFTConfig(max_steps=1)) != base
    assert cache_key(WorldConfig(), SFTConfig()) == base


def test_resolve_model_passes_other_specs_through(monkeypatch, tmp_path):
    assert resolve_model("Qwen/Qwen3-1.7B-Base") == "Qwen/Qwen3-1.7B-Base"
    assert resolve_model("/models/mine") == "/models/mine"
    with pytest.raises(UserError, match="tiny:solver"):
        resolve_model("tiny:teacher")
    monkeypatch.setenv("PASODOBLE_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path


def test_a_second_builder_waits_for_the_first_and_reuses_its_entry(tmp_path, capsys):
    """Two processes (here: threads, each with its own lock handle) needing one entry: the second waits on the
    first's lock, says so, and then finds the finished entry instead of building it again."""
    world, sft = WorldConfig.minimal(), SFTConfig(max_steps=1, batch_size=8, num_threads=None)
    final = tmp_path / cache_key(world, sft)
    held, built = threading.Event(), []

    def first():
        with build_lock(tmp_path / f".lock-{final.name}", "the test world"):
            held.set()
            built.append(_build(final, world, sft, progress=False))

    builder = threading.Thread(target=first)
    builder.start()
    held.wait(timeout=60)
    models = ensure_sft_models(tmp_path, world, sft, progress=False)
    builder.join(timeout=600)
    assert models == built[0]
    assert "waiting for another process building the tiny world" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".lock-{final.name}", final.name]
