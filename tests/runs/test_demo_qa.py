"""`pasodoble demo-qa`'s pure pieces: each role starts from its own SFT model, and the valid proposals of a run are
counted by the tier of the fact they ask, with the Solver's pass rate on them."""

from __future__ import annotations

from pathlib import Path

from pasodoble.config import load_config
from pasodoble.runs.demo_qa import QADemoConfig, proposal_tiers, proposals_table, train_config
from pasodoble.sft.qa_models import QAModels

TIER_OF = {"which craft did ada kel practise": "sft", "in which town was ada kel born": "corpus"}


def row(question, pass_rate, invalid=None):
    return {"question": question, "invalid_reason": invalid, "pass_rate": pass_rate}


def test_proposals_are_counted_by_the_tier_of_the_fact_they_ask():
    rows = [
        row("Which craft did Ada Kel practise?", 1.0),
        row("In which town was Ada Kel born?", 0.25),
        row("In which town was  ada kel born", 0.0),  # the canonical form matches
        row("Who is Ada Kel?", 0.5),
        row("In which town was Ada Kel born?", 0.0, invalid="not_grounded"),  # invalid: not counted
    ]
    got = proposal_tiers(rows, TIER_OF)
    assert got["valid"] == 4
    assert got["count"] == {"sft": 1, "corpus": 2, "multihop": 0, "other": 1}
    assert got["pass_rate"] == {"sft": 1.0, "corpus": 0.125, "multihop": None, "other": 0.5}
    table = proposals_table({"dualplay": {0: got}})
    assert "| dualplay-seed0 | 4 | 25.0 | 50.0 | 0.0 | 25.0 | 1.00 | 0.12 | - | 0.50 |" in table
    assert proposal_tiers([], TIER_OF)["valid"] == 0


def test_each_role_starts_from_its_own_model(tmp_path):
    cfg = load_config(QADemoConfig, "recipes/tiny-qa-grounded.yaml", [])
    models = QAModels.under(tmp_path / "entry", cfg.warm_up.sft.roles)
    train = train_config(cfg, models, "random_reward", 2, tmp_path / "run")
    assert Path(train.proposer.model) == tmp_path / "entry" / "proposer"
    assert Path(train.solver.model) == tmp_path / "entry" / "solver"
    assert (train.seed, train.rewards.solver_reward, train.schedule.samples_every) == (2, "random", 1)
    joint = train_config(cfg, QAModels.under(tmp_path / "e"), "dualplay", 0, tmp_path / "r")
    assert joint.proposer.model == joint.solver.model == str(tmp_path / "e" / "sft")
