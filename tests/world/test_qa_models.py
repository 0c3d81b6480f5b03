"""The trainable tiny QA world: the cold start sees sft-tier facts only, its tokenizer keeps the QA tags whole, it
is cached by config hash; `pasodoble demo-qa` runs a seed and the random-reward control end to end (slow)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from pasodoble.config import load_config
from pasodoble.io import read_jsonl
from pasodoble.qa.world import QAWorldConfig
from pasodoble.runs.demo_qa import QADemoConfig, run_demo_qa
from pasodoble.sft import SFTConfig
from pasodoble.world.model import ModelConfig
from pasodoble.world.qa_models import QAWarmUp, cache_key, ensure_qa_models

SMALL_MODEL = ModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, head_dim=8)


def small(steps: int = 3) -> QAWarmUp:
    return QAWarmUp(
        world=QAWorldConfig(num_people=6, num_towns=3),
        model=SMALL_MODEL,
        sft=SFTConfig(max_steps=steps, batch_size=8, warmup_steps=1, log_every=1),
    )


def test_cold_start_sees_only_sft_facts_and_is_cached(tmp_path):
    models = ensure_qa_models(tmp_path, small(), progress=False)
    held = read_jsonl(models.world_dir / "heldout.jsonl")
    asked = {r["prompt"] for r in read_jsonl(models.world_dir / "sft_solver.jsonl")}
    assert asked == {r["question"] for r in held if r["tier"] == "sft"}
    proposed = " ".join(r["completion"] for r in read_jsonl(models.world_dir / "sft_proposer.jsonl"))
    assert not any(f"<question>{r['question']}</question>" in proposed for r in held if r["tier"] != "sft")
    tokenizer = AutoTokenizer.from_pretrained(models.model_dir)
    assert len(tokenizer.tokenize("<question>Q</question><alias>A</alias>")) == 6
    assert len(read_jsonl(models.sft_metrics)) == 3
    done = (models.model_dir.parent / "done").stat().st_mtime_ns
    assert ensure_qa_models(tmp_path, small(), progress=False) == models  # a hit: nothing rebuilt
    assert (models.model_dir.parent / "done").stat().st_mtime_ns == done
    assert cache_key(small(4)) != cache_key(small())


@pytest.mark.slow
def test_demo_runs_a_seed_and_the_random_reward_control(tmp_path):
    cfg = load_config(
        QADemoConfig,
        "recipes/tiny-qa.yaml",
        [f"cache_dir={tmp_path / 'cache'}", "train.schedule.steps=1", "conditions=[dualplay,random_reward]"],
    )
    cfg.warm_up, cfg.run_dir = small(), str(tmp_path / "run")
    cfg.eval.num_samples = 2
    run_dir = run_demo_qa(cfg, progress=False)
    results = json.loads((run_dir / "results.json").read_text())
    assert set(results["after"]) == {"dualplay", "random_reward"}
    assert set(results["sft"]["greedy"]) == {"sft", "corpus", "multihop"}
    rows = [
        json.loads(line)
        for line in (run_dir / "random_reward-seed0" / "metrics.jsonl").read_text().splitlines()
    ]
    assert "proposer/valid/fraction" in rows[0]
    assert "| random_reward | corpus |" in (run_dir / "results.md").read_text()
