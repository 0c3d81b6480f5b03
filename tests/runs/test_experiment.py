"""The experiment's bookkeeping on literal results, and (slow) one tiny experiment end to end."""

from __future__ import annotations

import json

import pytest

from pasodoble.errors import ConfigError
from pasodoble.io import append_jsonl
from pasodoble.runs.experiment import (
    ExperimentConfig,
    eval_settings,
    operand_count,
    proposer_stats,
    results_markdown,
    run_one,
    summarise,
    summarise_all,
    train_config,
)


def result(condition, seed, t3, t4, label=None):
    return {
        "condition": condition,
        "seed": seed,
        "accuracy": {"t1": 0.9, "t2": 0.8, "t3": t3, "t4": t4},
        "sampled": {"t1": 0.5, "t2": 0.5, "t3": t3 / 2, "t4": t4 / 2},
        "train_s": 10.0,
        "label_accuracy": label,
        "label_accuracy_3plus": None if label is None else label / 2,
    }


def test_summary_gains_and_oracle_share_by_hand():
    cfg = ExperimentConfig(conditions=["sft", "online", "oracle"], seeds=[0, 1])
    results = [
        result("sft", 0, 0.2, 0.0),
        result("sft", 1, 0.2, 0.0),
        result("online", 0, 0.3, 0.1, 0.9),
        result("online", 1, 0.4, 0.0, 0.7),
        result("oracle", 0, 0.6, 0.2),
        result("oracle", 1, 0.6, 0.2),
    ]
    s = summarise(cfg, results)["conditions"]
    assert s["sft"]["above"]["mean"] == pytest.approx(0.1)
    assert s["online"]["above"]["mean"] == pytest.approx(0.2)  # seeds: (0.3+0.1)/2=0.2, (0.4+0)/2=0.2
    assert s["online"]["above"]["std"] == pytest.approx(0.0)
    assert s["online"]["t3"]["std"] == pytest.approx(0.05)  # population std of 0.3, 0.4
    assert s["online"]["gain_above"] == pytest.approx(0.1) and s["oracle"]["gain_above"] == pytest.approx(0.3)
    assert s["online"]["oracle_share"] == pytest.approx(1 / 3)
    assert s["online"]["label_accuracy"] == pytest.approx(0.8)
    summaries = summarise_all(cfg, results)
    assert set(summaries) == {"accuracy", "sampled"}
    sampled = summaries["sampled"]["conditions"]
    assert sampled["online"]["gain_above"] == pytest.approx(0.05)  # half the greedy values by construction
    text = results_markdown(cfg, summaries, 60.0)
    greedy_part, sampled_part = text.split("## Sampled")
    assert (
        "| online | 90.0 ± 0.0 | 80.0 ± 0.0 | 35.0 ± 5.0 | 5.0 ± 5.0 | 20.0 ± 0.0 | +10.0 | 33% | 80.0 | 40.0 |"
        in greedy_part
    )
    assert (
        "| online | 50.0 ± 0.0 | 50.0 ± 0.0 | 17.5 ± 2.5 | 2.5 ± 2.5 | 10.0 ± 0.0 | +5.0 | 33% | 80.0 | 40.0 |"
        in (sampled_part)
    )
    # Runs without a sampled evaluation (eval_samples=0) give the greedy table alone.
    greedy_only = [{**r, "sampled": None} for r in results]
    assert set(summarise_all(cfg, greedy_only)) == {"accuracy"}


def test_proposer_stats_checks_labels_with_world_arithmetic(tmp_path):
    rows = [
        {
            "step": 1,
            "question": "What is 12 + 3 * 4?",
            "answer": "24",
            "invalid_reason": None,
            "proposer_completion": "x",
        },
        {
            "step": 1,
            "question": "What is 12 + 3?",
            "answer": "16",
            "invalid_reason": None,
            "proposer_completion": "x",
        },
        {
            "step": 2,
            "question": "What is 5 * 6?",
            "answer": "30",
            "invalid_reason": None,
            "proposer_completion": "x",
        },
        {
            "step": 2,
            "question": None,
            "answer": None,
            "invalid_reason": "no_problem_tag",
            "proposer_completion": "x",
        },
    ]
    append_jsonl(tmp_path / "samples.jsonl", rows)
    stats = proposer_stats(tmp_path)
    assert stats["label_accuracy"] == pytest.approx(2 / 3) and stats["labels_checked"] == 3
    assert stats["label_accuracy_3plus"] == 1.0 and stats["labels_checked_3plus"] == 1
    assert stats["share_3plus_operands"] == {1: 0.5, 2: 0.0}
    assert operand_count("What is 10 * 3 + 7 * 2?") == 4


def test_conditions_map_to_train_overrides(tmp_path):
    cfg = ExperimentConfig(out_dir=str(tmp_path), steps=20)
    offline = train_config(cfg, "offline", 1)
    assert offline.schedule.mode == "offline" and offline.schedule.steps == 2  # 20 // (5 + 5) iterations
    assert offline.seed == 1 and offline.run_dir.endswith("offline-s1")
    rr = train_config(cfg, "random_reward", 0)
    assert rr.rewards.solver_reward == "random" and rr.schedule.steps == 20
    assert train_config(cfg, "no_diversity", 0).rewards.use_diversity is False
    assert train_config(cfg, "oracle", 0).schedule.mode == "oracle"
    with pytest.raises(ConfigError, match="conditions"):
        ExperimentConfig(conditions=["online", "magic"]).validate()


def test_finished_run_is_evaluated_again_not_retrained(tmp_path, monkeypatch):
    import pasodoble.checkpoint
    import pasodoble.runs.experiment as experiment
    import pasodoble.runs.train

    cfg = ExperimentConfig(out_dir=str(tmp_path / "exp"), eval_limit=300)
    done = tmp_path / "exp" / "runs" / "online-s0" / "eval.json"
    done.parent.mkdir(parents=True)
    old = {**result("online", 0, 0.5, 0.1, label=0.9), "eval": {**eval_settings(cfg), "limit": 50}}
    done.write_text(json.dumps(old))
    calls = {"scores": 0, "train": 0}

    def scores(train, model_dir, cfg):
        calls["scores"] += 1
        return {
            "accuracy": {"t3": 0.6, "t4": 0.2},
            "sampled": None,
            "scores": {"greedy": {"t3/a": 1.0, "t4/b": 0.0}},
            "eval_s": 1.0,
            "eval": eval_settings(cfg),
        }

    def train(config, resume=False):
        calls["train"] += 1
        assert resume is False  # no config.yaml was saved: nothing to resume
        weights["dir"] = tmp_path / "ckpt"

    weights = {"dir": tmp_path / "ckpt"}
    monkeypatch.setattr(experiment, "_scores", scores)
    monkeypatch.setattr(pasodoble.runs.train, "run_train", train)
    monkeypatch.setattr(pasodoble.checkpoint, "latest_checkpoint", lambda run_dir: weights["dir"])
    again = run_one(cfg, "online", 0)
    assert calls == {"scores": 1, "train": 0}  # new settings: evaluated again from the final weights
    assert again["train_s"] == 10.0 and again["eval"]["limit"] == 300 and again["accuracy"]["t3"] == 0.6
    assert json.loads(done.read_text()) == again
    assert run_one(cfg, "online", 0) == again and calls == {"scores": 1, "train": 0}  # now up to date
    done.write_text(json.dumps(old))
    weights["dir"] = None  # the final weights are gone: the run is trained again
    run_one(cfg, "online", 0)
    assert calls == {"scores": 2, "train": 1}


def test_an_unfinished_run_resumes_only_with_its_own_config(tmp_path, monkeypatch):
    import pasodoble.checkpoint
    from pasodoble.config import save_config
    from pasodoble.runs.experiment import resumable

    cfg = ExperimentConfig(out_dir=str(tmp_path / "exp"), checkpoint_every=2)
    train = train_config(cfg, "online", 0)
    assert train.schedule.checkpoint_every == 2
    assert (
        train_config(ExperimentConfig(out_dir=str(tmp_path)), "online", 0).schedule.checkpoint_every is None
    )
    run_dir = tmp_path / "exp" / "runs" / "online-s0"
    run_dir.mkdir(parents=True)
    checkpoint = {"dir": run_dir / "checkpoints" / "step-2"}
    monkeypatch.setattr(pasodoble.checkpoint, "latest_checkpoint", lambda d: checkpoint["dir"])
    assert not resumable(run_dir, train)  # no config.yaml: started over
    save_config(train, run_dir / "config.yaml")
    assert resumable(run_dir, train)
    other = train_config(
        ExperimentConfig(out_dir=str(tmp_path / "exp"), checkpoint_every=2, steps=31), "online", 0
    )
    assert not resumable(run_dir, other)  # another length: the run would not repeat an uninterrupted one
    checkpoint["dir"] = None
    assert not resumable(run_dir, train)  # nothing to resume from
    checkpoint["dir"] = run_dir / "checkpoints" / "step-2"
    (run_dir / "config.yaml").write_text("schedule: [not a mapping\n")
    assert not resumable(run_dir, train)  # a damaged config: started over, not a traceback


def tiny_world_overrides(tmp_path) -> list[str]:
    """A two-layer world of 20 passages, its SFT models cached under tmp_path/cache."""
    from pasodoble.sft import SFTConfig
    from pasodoble.sft.tiny import ensure_sft_models
    from pasodoble.world import WorldConfig

    sft = SFTConfig(max_steps=20, batch_size=8, log_every=10, num_threads=1)
    ensure_sft_models(tmp_path / "cache", WorldConfig.minimal(), sft, progress=False)
    return [
        f"cache_dir={tmp_path / 'cache'}",
        "world.corpus_size=20",
        "world.tier_size=4",
        "world.sft_solver_examples=200",
        "world.sft_proposer_examples=100",
        "world.model.hidden_size=32",
        "world.model.intermediate_size=64",
        "world.model.num_hidden_layers=2",
        "world.model.head_dim=8",
        "sft.max_steps=20",
        "sft.batch_size=8",
        "sft.log_every=10",
        "sft.num_threads=1",
        "num_threads=1",
        "proposer.max_completion_length=32",
        "solver.max_completion_length=16",
    ]


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, capsys):
    import hashlib

    from pasodoble.checkpoint import latest_checkpoint

    def weights(out) -> str:
        folder = latest_checkpoint(out / "runs" / "online-s0") / "solver" / "model"
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    overrides = tiny_world_overrides(tmp_path)
    kw = dict(conditions=["online"], seeds=[0], steps=4, checkpoint_every=2, eval_limit=2, eval_samples=0)
    kw["eval_max_new_tokens"] = 16
    whole = ExperimentConfig(out_dir=str(tmp_path / "whole"), overrides=overrides, **kw)
    run_one(whole, "online", 0)
    stopped = ExperimentConfig(out_dir=str(tmp_path / "stopped"), overrides=overrides, **kw)
    first = run_one(stopped, "online", 0)
    assert first["resumed"] is False and weights(tmp_path / "stopped") == weights(tmp_path / "whole")
    # As if killed after step 2: no eval.json, no step-4 checkpoint, `latest` naming step 2.
    run_dir = tmp_path / "stopped" / "runs" / "online-s0"
    (run_dir / "eval.json").unlink()
    import shutil

    shutil.rmtree(run_dir / "checkpoints" / "step-4")
    (run_dir / "checkpoints" / "latest").write_text("step-2")
    capsys.readouterr()
    again = run_one(stopped, "online", 0)
    assert "online seed 0: resuming from" in capsys.readouterr().out and again["resumed"] is True
    assert weights(tmp_path / "stopped") == weights(tmp_path / "whole")
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s is not None][-1] == 4


@pytest.mark.slow
def test_tiny_experiment_end_to_end(tmp_path):
    from pasodoble.runs.experiment import run_experiment

    cfg = ExperimentConfig(
        out_dir=str(tmp_path / "exp"),
        conditions=["sft", "online", "oracle"],
        seeds=[0],
        steps=1,
        eval_limit=2,
        eval_max_new_tokens=16,
        eval_samples=2,
        overrides=tiny_world_overrides(tmp_path),
    )
    out = run_experiment(cfg)
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert set(summary["conditions"]) == {"sft", "online", "oracle"}
    assert (
        "| online |" in (out / "results.md").read_text() and "## Sampled" in (out / "results.md").read_text()
    )
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert all(set(run["sampled"]) == {"t1", "t2", "t3", "t4"} for run in runs)
    assert (out / "difficulty.png").read_bytes()[:4] == b"\x89PNG"
    intervals = json.loads((out / "summary.json").read_text())
    assert intervals["arms"] == ["online", "oracle"] and intervals["n_per_tier"] == {
        f"t{i}": 2 for i in range(1, 5)
    }
    assert {r["metric"] for r in intervals["runs"]} == {"greedy", "sampled"}
    assert "Changes with intervals" in (out / "results.md").read_text()
    # A larger evaluation later re-scores the final weights; the training (its metrics) is not redone.
    metrics = (out / "runs" / "online-s0" / "metrics.jsonl").read_bytes()
    cfg.eval_limit = 3
    rerun = {
        run["condition"]: run
        for run in json.loads((run_experiment(cfg) / "results.json").read_text())["runs"]
    }
    assert (out / "runs" / "online-s0" / "metrics.jsonl").read_bytes() == metrics
    assert all(run["eval"]["limit"] == 3 for run in rerun.values())
    assert rerun["online"]["train_s"] == next(r for r in runs if r["condition"] == "online")["train_s"]


def test_a_stopped_evaluation_resumes_only_for_the_same_weights(tiny_lm, tmp_path, monkeypatch):
    import shutil

    import torch

    import pasodoble.evals.runner as runner
    from pasodoble.runs.experiment import evaluate_solver

    model, _, path = tiny_lm
    cfg = ExperimentConfig(out_dir=str(tmp_path), eval_seed=1, eval_sizes={"t1": 5, "t3": 5})
    cfg.eval_max_new_tokens, cfg.eval_samples = 3, 0  # greedy only
    train = train_config(cfg, "sft", 0)
    todo: list[int] = []
    real = runner._run_chunk

    def counted(engine, tokenizer, chunk, start, left, *args):
        todo.append(len(left))
        return real(engine, tokenizer, chunk, start, left, *args)

    monkeypatch.setattr(runner, "_run_chunk", counted)
    out = tmp_path / "eval"
    first = evaluate_solver(train, path, cfg, out)
    lines = (out / "greedy.jsonl").read_text().splitlines()
    assert todo == [10] and len(lines) == 10
    (out / "greedy.jsonl").write_text("\n".join(lines[:6]) + "\n")  # stopped after 6 problems
    again = evaluate_solver(train, path, cfg, out)
    assert todo == [10, 4] and again["scores"] == first["scores"]  # only the 4 left were written
    other = tmp_path / "other"
    shutil.copytree(path, other)
    changed = type(model).from_pretrained(other)
    with torch.no_grad():
        next(changed.parameters()).add_(1.0)
    changed.save_pretrained(other)
    (out / "greedy.jsonl").write_text("\n".join(lines[:6]) + "\n")
    evaluate_solver(train, other, cfg, out)
    assert todo == [10, 4, 10]  # other weights: none of the old answers is kept
