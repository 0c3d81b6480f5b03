"""The trainable tiny QA world: the cold start sees sft-tier facts only, its tokenizer keeps the QA tags whole, it
is cached by config hash; a separate warm-up gives each role its own model and the Solver's holds sft facts only;
`pasodoble demo-qa` runs a seed and the random-reward control end to end (slow)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from pasodoble.config import load_config
from pasodoble.errors import ConfigError
from pasodoble.io import read_jsonl
from pasodoble.qa.world import QAWorldConfig
from pasodoble.runs.demo_qa import QADemoConfig, run_demo_qa
from pasodoble.sft import SFTConfig
from pasodoble.sft.qa_models import QAModels, QAWarmUp, cache_key, ensure_qa_models, role_records
from pasodoble.world.model import ModelConfig

SMALL_MODEL = ModelConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, head_dim=8)


def small(steps: int = 3, proposer_facts: str = "sft", roles: str = "joint") -> QAWarmUp:
    return QAWarmUp(
        world=QAWorldConfig(num_people=6, num_towns=3, proposer_facts=proposer_facts),
        model=SMALL_MODEL,
        sft=SFTConfig(max_steps=steps, batch_size=8, warmup_steps=1, log_every=1, roles=roles),
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


def test_grounded_separate_warm_up_keeps_the_solver_on_sft_facts(tmp_path):
    models = ensure_qa_models(tmp_path, small(2, "all", "separate"), progress=False)
    assert models.proposer_dir.name == "proposer" and models.solver_dir.name == "solver"
    held = read_jsonl(models.world_dir / "heldout.jsonl")
    unseen = {r["question"] for r in held if r["tier"] != "sft"}
    proposed = read_jsonl(models.world_dir / "sft_proposer.jsonl")
    solved = read_jsonl(models.world_dir / "sft_solver.jsonl")
    runs = role_records(proposed, solved, "separate")
    assert set(runs) == {"proposer", "solver"} and runs["solver"] == solved
    assert not any(f"<question>{q}</question>" in r["completion"] for r in runs["solver"] for q in unseen)
    assert not unseen & {r["prompt"] for r in runs["solver"]}
    assert any(f"<question>{q}</question>" in r["completion"] for r in runs["proposer"] for q in unseen)
    for folder in (models.proposer_dir, models.solver_dir):
        assert (folder / "config.json").is_file() and AutoTokenizer.from_pretrained(folder) is not None
    rows = read_jsonl(models.sft_metrics)
    assert {k.split("/")[0] for row in rows for k in row if k.endswith("/sft/loss")} == {"proposer", "solver"}
    with pytest.raises(ValueError, match="proposer_dir and solver_dir"):
        _ = models.model_dir


def test_joint_records_and_folders_are_as_before():
    assert role_records([{"p": 1}], [{"s": 1}], "joint") == {"sft": [{"p": 1}, {"s": 1}]}
    joint = QAModels.under(Path("x"))
    assert joint.model_dir == joint.proposer_dir == joint.solver_dir == Path("x/sft")
    assert cache_key(QAWarmUp()) == "7131bc082063c16f"  # the default's key from before proposer_facts existed
    grounded = QAWarmUp(
        world=QAWorldConfig(proposer_facts="all"), sft=replace(QAWarmUp().sft, roles="separate")
    )
    assert cache_key(grounded) != cache_key(replace(grounded, sft=QAWarmUp().sft))


def test_a_grounded_proposer_needs_separate_roles():
    with pytest.raises(ConfigError, match=r"^warm_up\.sft\.roles: must be separate"):
        load_config(QADemoConfig, "recipes/tiny-qa-grounded.yaml", ["warm_up.sft.roles=joint"])
    with pytest.raises(ConfigError, match="proposer_facts: must be one of sft, all"):
        load_config(QADemoConfig, "recipes/tiny-qa-grounded.yaml", ["warm_up.world.proposer_facts=every"])
    cfg = load_config(QADemoConfig, "recipes/tiny-qa-grounded.yaml", [])
    assert cfg.warm_up.world.proposer_facts == "all" and cfg.warm_up.sft.roles == "separate"


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
