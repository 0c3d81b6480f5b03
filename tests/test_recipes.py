"""Every shipped recipe loads and validates with the config class of the command that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pasodoble.config import load_config
from pasodoble.demo import DemoConfig
from pasodoble.experiment import ExperimentConfig
from pasodoble.train import TrainConfig

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
KIND = {"demo.yaml": DemoConfig}


def kind(path: Path):
    """The config class that reads a recipe: experiments are tiny-ablation*.yaml, cold-start data cold-start*.yaml,
    SFT runs sft-*.yaml."""
    from pasodoble.sft.cli import SFTRunConfig
    from pasodoble.sft.data import SFTDataConfig

    for prefix, cls in (
        ("tiny-ablation", ExperimentConfig),
        ("cold-start", SFTDataConfig),
        ("sft-", SFTRunConfig),
    ):
        if path.name.startswith(prefix):
            return cls
    return KIND.get(path.name, TrainConfig)


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_recipe_validates(path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # cold-start recipes name it; validation checks it is set
    cfg = load_config(kind(path), path)
    if isinstance(cfg, ExperimentConfig):  # every run's TrainConfig (overrides included) validates too
        from pasodoble.experiment import train_config

        for condition in cfg.conditions:
            train_config(cfg, condition, cfg.seeds[0]).validate()
    if isinstance(cfg, TrainConfig):
        assert cfg.schedule.mode in ("online", "offline")
        assert cfg.proposer.num_generations >= 2 and cfg.solver.num_generations >= 2


def test_paper_recipes_carry_the_paper_hyperparameters():
    for name in ("qwen3-1.7b-online.yaml", "qwen3-1.7b-offline.yaml"):
        cfg = load_config(TrainConfig, RECIPES / name)
        assert (cfg.proposer.max_prompt_length, cfg.solver.max_prompt_length) == (1280, 512)
        for role in (cfg.proposer, cfg.solver):
            assert (role.num_generations, role.temperature, role.lr, role.max_completion_length) == (
                6,
                0.6,
                1e-6,
                6144,
            )
            assert (role.loss_type, role.beta, role.epsilon, role.max_grad_norm) == ("dr_grpo", 0.0, 0.2, 1.0)
        assert cfg.rewards.pass_rate_low == 0.2 and cfg.rewards.diversity_low == 0.3
        assert cfg.schedule.history_size == 100 and cfg.schedule.checkpoint_every == 40
    offline = load_config(TrainConfig, RECIPES / "qwen3-1.7b-offline.yaml").schedule
    assert (offline.mode, offline.steps, offline.proposer_phase_updates, offline.solver_phase_updates) == (
        "offline",
        200,
        10,
        5,
    )


def test_cold_start_recipe_carries_the_paper_settings(monkeypatch):
    from pasodoble.sft.data import SFTDataConfig

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    cfg = load_config(SFTDataConfig, RECIPES / "cold-start-qwen3-1.7b.yaml")
    assert (cfg.samples_per_passage, cfg.proposer_temperature, cfg.target_kept) == (6, 0.8, 2800)
    assert cfg.teacher.model == "Qwen/Qwen3-14B" and cfg.checker.model == "gpt-5-mini"
    assert cfg.checker.api_key_env == "OPENAI_API_KEY" and cfg.solver_completion == "teacher"
