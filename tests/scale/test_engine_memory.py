"""`pasodoble layout` and the launch check count each role's colocated vLLM engine: its `gpu_memory_utilization`
of the GPU, the largest one only when every engine sleeps (one is awake at a time), their sum otherwise."""

from __future__ import annotations

import json

import pytest

from pasodoble.config import load_config
from pasodoble.rollout import settings
from pasodoble.runs.train import TrainConfig
from pasodoble.scale.layout import (
    Launch,
    LayoutError,
    check_layout,
    engine_memory_gb,
    memory_table,
    model_architectures,
)

QWEN3_1_7B = {  # Qwen3-1.7B-Base's config.json numbers (architecture only)
    "model_type": "qwen3",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
ONE_H100 = Launch(world_size=1, visible_gpus=1, gpu_memory_gb=80)


def config(tmp_path, *overrides):
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(QWEN3_1_7B))
    return load_config(
        TrainConfig,
        "recipes/qwen3-1.7b-online.yaml",
        [f"proposer.model={folder}", f"solver.model={folder}", *overrides],
    )


@pytest.fixture
def with_vllm(monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: True)


def test_auto_engines_in_sleep_mode_count_the_largest_once(tmp_path, with_vllm):
    cfg = config(
        tmp_path, "proposer.vllm.gpu_memory_utilization=0.2", "solver.vllm.gpu_memory_utilization=0.3"
    )
    engines = engine_memory_gb(cfg, ONE_H100, 80)
    assert engines["rows"] == pytest.approx({"proposer": 16.0, "solver": 24.0})
    assert engines["sleep"] and engines["peak"] == pytest.approx(24.0)


def test_engines_awake_together_add_up(tmp_path, with_vllm):
    cfg = config(tmp_path, "proposer.vllm.sleep_mode=false")
    engines = engine_memory_gb(cfg, ONE_H100, 80)
    assert not engines["sleep"] and engines["peak"] == pytest.approx(2 * 0.3 * 80)


def test_no_engine_memory_without_vllm_or_for_hf_or_servers(tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "vllm_available", lambda: False)
    assert engine_memory_gb(config(tmp_path), ONE_H100, 80)["peak"] == 0.0  # auto is hf here
    monkeypatch.setattr(settings, "vllm_available", lambda: True)
    cfg = config(tmp_path, "proposer.engine=hf", "solver.engine=vllm_server")
    assert engine_memory_gb(cfg, ONE_H100, 80)["rows"] == {}
    assert engine_memory_gb(config(tmp_path), Launch(world_size=1, visible_gpus=0), 80)["rows"] == {}


def test_the_table_shows_each_engine_and_the_check_counts_it(tmp_path, with_vllm):
    cfg = config(tmp_path, "proposer.vllm.sleep_mode=false", "solver.vllm.sleep_mode=false")
    lines, _ = memory_table(cfg, ONE_H100, model_architectures(cfg))
    text = "\n".join(lines)
    assert "vllm proposer" in text and "vllm solver" in text
    without, _ = memory_table(
        config(tmp_path, "proposer.engine=hf", "solver.engine=hf"), ONE_H100, model_architectures(cfg)
    )
    total = lambda rows: float(rows[-1].split()[1])  # noqa: E731
    assert total(lines) - total(without) == pytest.approx(2 * 0.3 * 80, abs=0.02)
    tight = config(
        tmp_path, "proposer.vllm.gpu_memory_utilization=0.9", "solver.vllm.gpu_memory_utilization=0.9"
    )
    tight.proposer.vllm.sleep_mode = tight.solver.vllm.sleep_mode = False
    with pytest.raises(LayoutError, match=r"vLLM 144\.0"):
        check_layout(tight, ONE_H100, model_architectures(tight))
