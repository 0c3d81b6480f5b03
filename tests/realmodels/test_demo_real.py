"""`pasodoble demo-real --quick` end to end on SmolLM2-135M (every phase, a few steps): the table has every tier
and both decodings, the cold-start SFT lowered the loss; and the ETA arithmetic on literal figures."""

from __future__ import annotations

import json
import logging

import pytest

from pasodoble.cli import main
from pasodoble.errors import ConfigError
from pasodoble.runs.demo_real import Clock, RealDemoConfig, phase_keys, planned_tokens, seeds_table
from pasodoble.runs.train import TrainConfig
from pasodoble.world.problems import TIERS


def test_eta_scales_the_measured_seconds_per_token_to_the_phases_left():
    clock = Clock()
    assert clock.eta_s() is None
    clock.plan = {"sft": 1000.0, "eval sft": 500.0, "dual-play": 2000.0}
    clock.seconds = {"fetch": 99.0, "sft": 50.0}  # fetch is not planned: it does not set the rate
    assert clock.eta_s() == pytest.approx(0.05 * 2500)


def test_plan_counts_every_phase_and_no_eval_after_without_dual_play():
    config = RealDemoConfig()
    plan = planned_tokens(config, 100.0, TrainConfig())
    assert plan["sft"] == config.sft.max_steps * config.sft.batch_size * 100.0
    assert plan["eval sft"] == plan["eval after"] > 0 and plan["dual-play"] > 0
    config.dualplay.steps = 0
    assert planned_tokens(config, 100.0, TrainConfig())["eval after"] == 0.0


def test_one_run_keeps_the_plain_layout_and_seeds_name_each_run():
    config = RealDemoConfig()
    assert config.runs() == [("dualplay", "dualplay", 0)] and phase_keys(config) == [
        ("dual-play", "eval after")
    ]
    config.seeds, config.conditions = [0, 1], ["dualplay", "random_reward"]
    config.validate()
    assert [name for name, _, _ in config.runs()] == [
        "dualplay-seed0",
        "dualplay-seed1",
        "random_reward-seed0",
        "random_reward-seed1",
    ]
    assert phase_keys(config)[2] == ("dual-play random_reward-seed0", "eval random_reward-seed0")


@pytest.mark.parametrize(
    "override",
    [
        {"seeds": []},
        {"seeds": [1, 1]},
        {"conditions": ["ppo"]},
        {"conditions": []},
        {"sft_from": "/nonexistent"},
    ],
)
def test_bad_seeds_conditions_or_start_are_refused_by_name(override):
    config = RealDemoConfig(**override)
    with pytest.raises(ConfigError) as err:
        config.validate()
    assert next(iter(override)) in str(err.value)


def test_seeds_table_gives_the_mean_change_and_each_seed():
    def result(greedy: float, sampled: float) -> dict:
        return {"per_tier": {"t1": {"greedy_acc": greedy, "sampled_avg": sampled}}}

    runs = [
        ("dualplay-seed0", "dualplay", 0),
        ("dualplay-seed1", "dualplay", 1),
        ("random_reward-seed0", "random_reward", 0),
    ]
    afters = {
        "dualplay-seed0": result(0.6, 0.5),
        "dualplay-seed1": result(0.8, 0.3),
        "random_reward-seed0": result(0.4, 0.2),
    }
    lines = seeds_table(result(0.5, 0.25), afters, runs, above=["t1"]).splitlines()
    assert (
        lines[2]
        == "| dualplay | t1 (above SFT) | 50.0 | 70.0 | +20.0 | 60.0, 80.0 | 25.0 | 40.0 | +15.0 | 50.0, 30.0 |"
    )
    assert (
        lines[3]
        == "| random_reward | t1 (above SFT) | 50.0 | 40.0 | -10.0 | 40.0 | 25.0 | 20.0 | -5.0 | 20.0 |"
    )


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.timeout(3600)  # a hang guard: minutes on a quiet core, far more on a loaded one
def test_quick_demo_real_runs_every_phase(smol_dir, tmp_path, caplog):
    out = tmp_path / "demo"
    with caplog.at_level(logging.INFO, logger="pasodoble.runs.demo_real"):
        assert main(["demo-real", "--quick", "--out", str(out), "--no-progress"]) == 0
    phases = json.loads((out / "phases.json").read_text())
    assert list(phases["seconds"]) == ["fetch", "data", "sft", "eval sft", "dual-play", "eval after"]
    sft = phases["sft"]
    assert sft["both/sft/loss_last"] < sft["both/sft/loss_first"], sft
    summary = json.loads((out / "eval" / "results.json").read_text())
    for run in ("sft", "dualplay"):
        assert list(summary[run]["per_tier"]) == list(TIERS)
        assert set(summary[run]["settings"]) == {"greedy", "sampled"}
        for row in summary[run]["per_tier"].values():
            assert 0.0 <= row["greedy_acc"] <= 1.0 and 0.0 <= row["sampled_avg"] <= 1.0
    table = (out / "eval" / "results.md").read_text()
    assert "Greedy SFT" in table and "Sampled after" in table
    for tier in TIERS:
        assert f"| {tier}" in table
    assert "| t4 (above SFT) |" in caplog.text and "[demo-real] done in" in caplog.text


def test_pooled_table_gives_the_change_over_seeds_with_both_intervals():
    from pasodoble.runs.demo_real import pooled_table

    def result(right: int) -> dict:
        scores = {f"t1/{i}": float(i < right) for i in range(10)}
        return {"per_tier": {"t1": {}}, "scores": {"greedy": scores, "sampled": scores}}

    runs = [("dualplay-seed0", "dualplay", 0), ("dualplay-seed1", "dualplay", 1)]
    lines = pooled_table(
        result(5), {"dualplay-seed0": result(6), "dualplay-seed1": result(8)}, runs
    ).splitlines()
    # changes +10 and +30 points: mean +20; t(1) = 12.706, sd = 14.14, half-width 12.706 * 14.14 / sqrt(2) = 127.1
    assert lines[2].startswith("| dualplay | t1 | +20.0 [")
    assert "| +20.0 [-107.1, +147.1] |" in lines[2]
