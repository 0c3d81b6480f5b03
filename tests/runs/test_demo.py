"""`pasodoble demo` end to end at minimal size: every file of the run directory, and the CLI."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from pasodoble.io import append_jsonl, read_jsonl
from pasodoble.runs.demo import (
    DemoConfig,
    DemoDualPlayConfig,
    DemoEvalConfig,
    band_shares,
    change_table,
    changes,
    run_demo,
    verdict_line,
)
from pasodoble.runs.demo_cli import register
from pasodoble.sft import SFTConfig
from pasodoble.world import WorldConfig


def test_band_shares(tmp_path):
    path = tmp_path / "samples.jsonl"
    rates = {"a": [1, 1, 1, 1], "b": [1, 0, 0, 0], "c": [1, 1, 0, 0], "d": [0, 0, 0, 0]}
    append_jsonl(path, [{"source": "t3", "id": i, "correct": bool(c)} for i, cs in rates.items() for c in cs])
    assert band_shares(path) == {"t3": 0.5}  # b (0.25) and c (0.5) are inside (0.2, 1); a and d are not


def test_demo_minimal_end_to_end(tmp_path):
    config = DemoConfig(
        world=WorldConfig.minimal(),
        sft=SFTConfig(max_steps=4, batch_size=8, log_every=2, num_threads=None),
        dualplay=DemoDualPlayConfig(steps=2),
        eval=DemoEvalConfig(num_samples=2, max_new_tokens=12, problems_per_tier=2),
        run_dir=str(tmp_path / "run"),
        cache_dir=str(tmp_path / "cache"),
    )
    run = run_demo(config, progress=False)
    assert yaml.safe_load((run / "config.yaml").read_text())["sft"]["max_steps"] == 4
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows if "both/sft/loss" in r] == [2, 4]
    assert "solver/eval_t1/greedy_acc" in rows[-1]
    assert any("solver/sft_eval_t3/greedy_acc" in r for r in rows)
    assert (run / "checkpoints" / "sft" / "model.safetensors").is_file()
    results = json.loads((run / "eval" / "results.json").read_text())
    assert results["tiers_above_sft"] == ["t3", "t4"]
    for phase in ("sft", "dualplay"):  # the SFT start and the dual-play Solver, measured in the same run
        assert set(results[phase]["per_tier"]) == {"t1", "t2", "t3", "t4"}
        assert all(r["n"] == 2 for r in results[phase]["per_tier"].values())
        assert len(read_jsonl(run / "eval" / phase / "sampled" / "samples.jsonl")) == 8 * 2
        assert (run / "eval" / phase / "greedy" / "results.md").is_file()
    for tier, change in results["change"].items():
        before, after = results["sft"]["per_tier"][tier], results["dualplay"]["per_tier"][tier]
        assert change["sampled_avg"] == after["sampled_avg"] - before["sampled_avg"]
    assert "| t3 (above SFT) |" in (run / "eval" / "results.md").read_text()
    assert "dualplay" in str(results["dualplay"]["model"])  # the evaluated Solver is the dual-play run's
    assert (run / "sft_loss.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_overrides(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr("pasodoble.runs.demo.run_demo", lambda config, progress: seen.update(config=config))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["demo", "--out", str(tmp_path), "sft.max_steps=7", "eval.num_samples=4"])
    assert args.func(args) == 0
    assert seen["config"].sft.max_steps == 7 and seen["config"].eval.num_samples == 4
    assert seen["config"].run_dir == str(tmp_path)


def test_recipe_spells_out_the_defaults():
    from pathlib import Path

    from pasodoble.config import load_config

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "demo.yaml"
    assert load_config(DemoConfig, recipe) == DemoConfig()


def test_change_table_signs_intervals_and_verdict():
    def summary(right, sampled):
        return {
            "per_tier": {"t3": {"greedy_acc": right / 10, "sampled_avg": sampled, "in_band": 0.5, "n": 10}},
            "scores": {
                "greedy": {f"t3/{i}": float(i < right) for i in range(10)},
                "sampled": {f"t3/{i}": sampled for i in range(10)},
            },
        }

    before, after = summary(5, 0.4), summary(6, 0.3)
    change = changes(before, after)["t3"]
    assert change["greedy_acc"] == pytest.approx(0.1)
    row = change_table(before, after, ["t3"]).splitlines()[-1]
    # one problem of ten gained: resampled means are k/10 with k ~ Binomial(10, 0.1), whose 2.5% and 97.5%
    # quantiles are 0 and 3; the sampled change is -0.1 on every problem
    assert row.startswith(
        "| t3 (above SFT) | 10 | 50.0 | 60.0 | +10.0 [+0.0, +30.0] | 40.0 | 30.0 | -10.0 [-10.0, -10.0] |"
    )
    line = verdict_line("t3", change)
    assert "greedy +10.0 [+0.0, +30.0] points, within noise" in line
    assert "sampled -10.0 [-10.0, -10.0] points, below the start" in line
