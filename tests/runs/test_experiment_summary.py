"""The experiment's summary with intervals and the pre-registered verdict, on literal per-problem scores."""

from __future__ import annotations

import pytest

from pasodoble.errors import ConfigError
from pasodoble.runs.experiment import ExperimentConfig
from pasodoble.runs.experiment_summary import summary, summary_markdown


def run(condition, seed, t3_right, t1_right=50, n=100):
    """A run whose first `t3_right` of n t3 problems (and `t1_right` of t1) are right, greedy."""
    greedy = {f"t3/p{i:03d}": float(i < t3_right) for i in range(n)}
    greedy |= {f"t1/p{i:03d}": float(i < t1_right) for i in range(n)}
    return {
        "condition": condition,
        "seed": seed,
        "scores": {"greedy": greedy},
        "mechanism": {"label_correct": 0.9, "proposer_gradient": 0.5},
    }


def config(**kw):
    return ExperimentConfig(
        conditions=["sft", "verified", "uniform_true"],
        seeds=[0, 1, 2],
        resamples=2000,
        primary_arm="verified",
        control_arm="uniform_true",
        **kw,
    )


def test_changes_intervals_and_a_met_verdict():
    results = [run("sft", s, 40) for s in range(3)]
    results += [run("verified", s, 40 + g) for s, g in enumerate((8, 10, 12))]
    results += [run("uniform_true", s, 40 + g) for s, g in enumerate((6, 6, 6))]
    s = summary(config(), results)
    assert s["n_per_tier"] == {"t1": 100, "t3": 100}
    t3 = s["pooled"]["verified"]["greedy"]["t3"]
    assert t3["per_seed"] == pytest.approx([0.08, 0.10, 0.12])
    assert t3["hierarchical"]["estimate"] == pytest.approx(0.10)
    # changes on a prefix of problems only ever go up: every resample's change is >= 0
    assert 0 < t3["hierarchical"]["low"] < 0.10 < t3["hierarchical"]["high"]
    assert t3["t"]["low"] == pytest.approx(0.10 - 4.303 * 0.02 / 3**0.5, abs=1e-6)
    one = next(r for r in s["runs"] if (r["arm"], r["seed"], r["tier"]) == ("verified", 0, "t3"))
    assert (one["start"], one["after"]) == (0.40, 0.48) and one["change"]["estimate"] == pytest.approx(0.08)
    v = s["verdict"]
    assert v["primary"]["met"] and v["primary"]["words"] == "above the start"
    assert v["go_no_go"] == {"control_arm": "uniform_true", "seed0_change": pytest.approx(0.06), "go": True}
    assert v["primary_vs_control"]["estimate"] == pytest.approx(0.04)
    assert v["non_inferiority"]["t1"]["met"]  # t1 unchanged
    assert v["other_tiers"] == {}  # t1 is a guard tier, t3 the primary: nothing else was scored
    others = summary(config(guard_tiers=[]), results)["verdict"]["other_tiers"]
    assert list(others) == ["t1"] and others["t1"]["estimate"] == 0.0
    text = summary_markdown(s)
    assert "MET" in text and "+10.0 [" in text and "go." in text


def test_a_seed_that_did_not_move_fails_the_verdict_and_a_weak_control_is_no_go():
    results = [run("sft", s, 40, t1_right=60) for s in range(3)]
    results += [run("verified", s, 40 + g, t1_right=50) for s, g in enumerate((10, 10, 0))]
    results += [run("uniform_true", s, 42) for s in range(3)]
    v = summary(config(), results)["verdict"]
    assert not v["primary"]["every_seed_positive"] and not v["primary"]["met"]
    assert not v["go_no_go"]["go"]  # +2 points < 4
    assert not v["non_inferiority"]["t1"]["met"]  # -10 points on t1, margin 3
    assert "NO GO" in summary_markdown(summary(config(), results))


def test_runs_on_different_problems_are_refused():
    results = [run("sft", 0, 40), run("verified", 0, 45, n=90)]
    with pytest.raises(ValueError, match="different problems"):
        summary(ExperimentConfig(conditions=["sft", "verified"], seeds=[0]), results)


def test_summary_file_names_folders_not_machine_paths(tmp_path):
    import json

    from pasodoble.runs.experiment import write_summary

    cfg = config(out_dir=str(tmp_path / "deep" / "label-noise"))
    write_summary(
        cfg, [run("sft", 0, 40), run("verified", 0, 45), run("uniform_true", 0, 50)], tmp_path / "s.json"
    )
    written = json.loads((tmp_path / "s.json").read_text())
    assert written["config"]["out_dir"] == "label-noise" and written["config"]["cold_start"] is None
    assert str(tmp_path) not in (tmp_path / "s.json").read_text()


def test_a_condition_may_run_at_fewer_seeds():
    from pasodoble.errors import ConfigError

    cfg = config(arm_seeds={"uniform_true": [0]})
    assert cfg.seeds_of("uniform_true") == [0] and cfg.seeds_of("verified") == [0, 1, 2]
    results = [run("sft", s, 40) for s in range(3)] + [run("verified", s, 45) for s in range(3)]
    results.append(run("uniform_true", 0, 50))
    pooled = summary(cfg, results)["pooled"]
    assert pooled["uniform_true"]["seeds"] == [0] and pooled["verified"]["seeds"] == [0, 1, 2]
    with pytest.raises(ConfigError):
        config(arm_seeds={"oracel": [0]}).validate()  # a misspelt arm
    with pytest.raises(ConfigError):
        config(arm_seeds={"verified": []}).validate()
    # the recipe's seeds for an arm this run leaves out (a pilot of two conditions) are no error
    pilot = config(arm_seeds={"uniform_true": [0]})
    pilot.conditions, pilot.primary_arm, pilot.control_arm = ["sft", "uniform_true"], None, None
    pilot.validate()
    pilot.arms = {"random_reward_verified": ["rewards.solver_reward=random"]}
    pilot.arm_seeds = {"random_reward_verified": [0]}  # as the SmolLM2 recipe has it, in a pilot of sft and B
    pilot.validate()


def test_a_run_of_some_arms_is_valid_and_its_verdict_leaves_out_what_it_lacks():
    # one process a core: `conditions=[uniform_true]` in one, `conditions=[verified]` in the other, same out_dir
    part = config()
    part.conditions = ["uniform_true"]
    part.validate()
    s = summary(part, [run("sft", 0, 40), run("uniform_true", 0, 46)])
    assert "primary" not in s["verdict"] and "primary_vs_control" not in s["verdict"]
    assert s["verdict"]["go_no_go"]["go"]  # the control's seed 0 against the start is there
    with pytest.raises(ConfigError, match="primary_arm"):
        ExperimentConfig(
            conditions=["sft", "verified"], primary_arm="verfied"
        ).validate()  # misspelt: an error
