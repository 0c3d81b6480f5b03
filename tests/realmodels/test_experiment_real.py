"""The SmolLM2 experiment's smoke recipe end to end on SmolLM2-135M-Instruct: every arm from one cold start, two
steps, a few problems; summary.json holds the per-run changes, the pooled intervals and the verdict's parts."""

from __future__ import annotations

import json
import shutil

import pytest

from pasodoble.cli import main
from pasodoble.io import read_jsonl
from pasodoble.world import WorldConfig, build_world
from pasodoble.world.select import SelectConfig


@pytest.mark.real
@pytest.mark.timeout(1800)  # a hang guard: a few minutes on a quiet core
def test_smollm2_experiment_smoke_recipe(smol_dir, tmp_path):
    # A cold start folder as `pasodoble demo-real --out COLD` leaves it: the model (here the packaged one, not
    # fine-tuned: the smoke run tests the pipeline, not learning) and its copy-form world.
    cold = tmp_path / "cold"
    shutil.copytree(smol_dir, cold / "checkpoints" / "sft")
    world = WorldConfig(
        corpus_size=20, tier_size=2, sft_solver_examples=8, sft_proposer_examples=4, passages="worked",
        proposer_answer="copied", select=SelectConfig(every=0),
    )  # fmt: skip
    build_world(cold / "world", world)
    out = tmp_path / "exp"
    args = [
        "experiment",
        "recipes/tiny-ablation-smollm2-135m-smoke.yaml",
        f"cold_start={cold}",
        f"out_dir={out}",
    ]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"] == ["verified", "uniform_true", "random_reward_verified"]
    assert summary["n_per_tier"] == {"t1": 2, "t2": 2, "t3": 3, "t4": 2}
    assert {(r["arm"], r["tier"]) for r in summary["runs"]} == {
        (a, t) for a in summary["arms"] for t in ("t1", "t2", "t3", "t4")
    }
    assert {"primary", "go_no_go", "primary_vs_control", "non_inferiority"} <= set(summary["verdict"])
    rows = read_jsonl(out / "runs" / "verified-s0" / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        assert "proposer/advantage/nonzero" in row and "proposer/valid/fraction" in row
    oracle = read_jsonl(out / "runs" / "uniform_true-s0" / "metrics.jsonl")
    assert all("solver/no_answer/fraction" in row for row in oracle)
    assert "Primary endpoint (verified, t3 greedy" in (out / "results.md").read_text()
