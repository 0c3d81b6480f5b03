"""Every shipped recipe loads and validates with the config class of the command that reads it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pasodoble.config import load_config
from pasodoble.runs.demo import DemoConfig
from pasodoble.runs.demo_qa import QADemoConfig
from pasodoble.runs.experiment import ExperimentConfig
from pasodoble.runs.train import TrainConfig
from pasodoble.scale.layout import Launch, LayoutError, check_layout, model_architectures
from tests.runs.test_layout import ARCHS, model_dir

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
KIND = {"demo.yaml": DemoConfig, "tiny-qa.yaml": QADemoConfig, "tiny-qa-grounded.yaml": QADemoConfig}
# Recipes that another command completes: demo-real's dual-play recipe gets its world's corpus from the demo;
# the QA recipes take the corpus their user gives.
NEEDS_CORPUS = {"smollm2-135m-online.yaml", "smollm2-135m-qa.yaml"} | {
    f"qwen3-{size}-qa-online.yaml" for size in ("0.6b", "1.7b", "4b")
}


def kind(path: Path):
    """The config class that reads a recipe: experiments are tiny-ablation*.yaml, cold-start data cold-start*.yaml,
    SFT runs sft-*.yaml."""
    from pasodoble.runs.demo_real import RealDemoConfig
    from pasodoble.sft.cli import SFTRunConfig
    from pasodoble.sft.data import SFTDataConfig

    for prefix, cls in (
        ("tiny-ablation", ExperimentConfig),
        ("cold-start", SFTDataConfig),
        ("sft-", SFTRunConfig),
        ("smollm2-135m-demo", RealDemoConfig),
    ):
        if path.name.startswith(prefix):
            return cls
    return KIND.get(path.name, TrainConfig)


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_recipe_validates(path, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # cold-start recipes name it; validation checks it is set
    overrides = []
    if path.name in NEEDS_CORPUS:
        (tmp_path / "corpus.jsonl").write_text('{"text": "Numbers: 22, 6, 4. Operations: +."}\n')
        overrides.append(f"knowledge.path={tmp_path / 'corpus.jsonl'}")
    cfg = load_config(kind(path), path, overrides)
    if isinstance(cfg, ExperimentConfig):  # every run's TrainConfig (overrides included) validates too
        from pasodoble.runs.experiment import train_config

        if Path(cfg.recipe).name in NEEDS_CORPUS:  # a real model's experiment: cold_start names the corpus
            (tmp_path / "corpus.jsonl").write_text('{"text": "Fact: 22 + 6 = 28."}\n')
            cfg.overrides.append(f"knowledge.path={tmp_path / 'corpus.jsonl'}")

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


PAPER_RECIPES = sorted(p for p in RECIPES.glob("qwen*.yaml"))


def test_every_paper_model_has_an_online_and_an_offline_recipe():
    names = {p.name for p in PAPER_RECIPES}
    for model in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"):
        assert {f"{model}-online.yaml", f"{model}-offline.yaml"} <= names


def claimed_layouts(path: Path) -> list[tuple[int, float]]:
    """The recipe's `# layouts: 4x80GB 8x80GB` header line as (GPUs, GB per GPU) pairs."""
    line = next(line for line in path.read_text().splitlines() if line.startswith("# layouts:"))
    return [(int(n), float(gb)) for n, gb in re.findall(r"(\d+)x(\d+)GB", line)]


@pytest.mark.parametrize("path", PAPER_RECIPES, ids=lambda p: p.name)
def test_paper_recipe_fits_every_layout_it_claims(path, tmp_path):
    overrides = []
    if path.name in NEEDS_CORPUS:
        (tmp_path / "corpus.jsonl").write_text('{"text": "The town of Zemosk lies on the river Quovelsa."}\n')
        overrides.append(f"knowledge.path={tmp_path / 'corpus.jsonl'}")
    cfg = load_config(TrainConfig, path, overrides)
    assert cfg.proposer.model == cfg.solver.model and cfg.proposer.model in ARCHS
    folder = model_dir(tmp_path, "m", ARCHS[cfg.proposer.model])
    cfg.proposer.model = cfg.solver.model = folder
    layouts = claimed_layouts(path)
    assert layouts
    for gpus, gb in layouts:
        launch = Launch(world_size=gpus, local_world_size=gpus, visible_gpus=gpus, gpu_memory_gb=gb)
        resolved = check_layout(cfg, launch, model_architectures(cfg))
        assert resolved.world_size == gpus and sum(resolved.proposer_shares) == 6
    # ...and the recipe is not trivially small: half the smallest claimed GPU count's memory does not fit.
    gpus, gb = min(layouts)
    with pytest.raises(LayoutError):
        check_layout(
            cfg,
            Launch(world_size=gpus, local_world_size=gpus, visible_gpus=gpus, gpu_memory_gb=gb / 4),
            model_architectures(cfg),
        )


@pytest.mark.parametrize("path", sorted((RECIPES / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_load(path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    expected = {"1gpu.yaml": 1, "4gpu.yaml": 4, "8gpu.yaml": 8, "8gpu-dedicated.yaml": 6, "2node.yaml": 16}
    expected = {**expected, "cpu-2.yaml": 2}[path.name]
    assert config.num_processes == expected
    assert config.num_machines == (2 if path.name == "2node.yaml" else 1)


def test_the_papers_dedicated_layout_resolves_for_the_8_gpu_config(tmp_path):
    """2 vLLM GPUs + 6 training GPUs, as `recipes/accelerate/8gpu-dedicated.yaml` documents it."""
    cfg = load_config(
        TrainConfig,
        RECIPES / "qwen3-1.7b-online.yaml",
        ["distributed.rollout=dedicated", "distributed.vllm_gpus=2"],
    )
    folder = model_dir(tmp_path, "m", ARCHS[cfg.proposer.model])
    cfg.proposer.model = cfg.solver.model = folder
    cfg.proposer.engine = cfg.solver.engine = (
        "vllm_server"  # set after loading: the default test venv has no vllm
    )
    launch = Launch(world_size=6, local_world_size=6, visible_gpus=8, gpu_memory_gb=80)
    resolved = check_layout(cfg, launch, model_architectures(cfg))
    assert resolved.vllm_servers == {"proposer": [6], "solver": [7]} and len(resolved.solver_shares) == 6
    with pytest.raises(LayoutError, match="7 training processes on this node but 6 training GPUs"):
        check_layout(cfg, Launch(world_size=7, local_world_size=7, visible_gpus=8), model_architectures(cfg))


def test_cold_start_recipe_carries_the_paper_settings(monkeypatch):
    from pasodoble.sft.data import SFTDataConfig

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    cfg = load_config(SFTDataConfig, RECIPES / "cold-start-qwen3-1.7b.yaml")
    assert (cfg.samples_per_passage, cfg.proposer_temperature, cfg.target_kept) == (6, 0.8, 2800)
    assert cfg.teacher.model == "Qwen/Qwen3-14B" and cfg.checker.model == "gpt-5-mini"
    assert cfg.checker.api_key_env == "OPENAI_API_KEY" and cfg.solver_completion == "teacher"
