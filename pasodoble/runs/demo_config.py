"""The configs of the demos, read and checked without torch: `pasodoble demo` (`DemoConfig`: the tiny world, the SFT
warm-up, the short dual-play run and the per-tier evaluation; run by `demo.py`), `demo-real` (`RealDemoConfig`: the
same task on a real model; `demo_real.py`) and `demo-qa` (`QADemoConfig`: the tiny QA world; `demo_qa.py`). Each
run module re-exports its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pasodoble.errors import ConfigError
from pasodoble.runs.train_config import TrainConfig
from pasodoble.sft.config import QAWarmUp, SFTConfig
from pasodoble.world.config import WorldConfig
from pasodoble.world.select import SelectConfig

REPO = Path(__file__).resolve().parents[2]  # the clone's root, which holds recipes/
# the dual-play runs `demo-real` and `demo-qa` make per seed: condition -> rewards.solver_reward
CONDITIONS = {"dualplay": "correct", "random_reward": "random"}


@dataclass
class DemoEvalConfig:
    num_samples: int = 8  # sampled answers per problem (pass-rate band and avg@k)
    temperature: float = 1.0  # temperature of the sampled evaluation (greedy runs too)
    max_new_tokens: int = 192  # completion budget; the longest worked t4 answer takes 172 tokens
    problems_per_tier: int | None = None  # evaluate only the first N problems of each tier (None: all)
    batch_size: int = 128  # sequences per generate call
    seed: int = 0  # sampling seed

    def validate(self) -> None:
        if self.num_samples < 2:
            raise ConfigError("eval.num_samples", "must be at least 2 to measure pass rates, e.g. 8")
        if self.problems_per_tier is not None and self.problems_per_tier < 1:
            raise ConfigError("eval.problems_per_tier", "must be at least 1, or null for all")


@dataclass
class DemoDualPlayConfig:
    steps: int = 30  # online dual-play steps between SFT and evaluation (0: skip, evaluate the SFT Solver)
    recipe: str = "recipes/tiny-online.yaml"  # training recipe; world, sft and cache_dir come from the demo
    # dotted TrainConfig overrides, e.g. solver.lr=1e-4 (default: one torch thread, as the demo's SFT and evaluation)
    overrides: list[str] = field(default_factory=lambda: ["num_threads=1"])

    def validate(self) -> None:
        if self.steps < 0:
            raise ConfigError("dualplay.steps", "must be >= 0 (0 skips dual-play)")


@dataclass
class DemoConfig:
    world: WorldConfig = field(default_factory=WorldConfig)  # the tiny world (data, tokenizer, model size)
    sft: SFTConfig = field(default_factory=SFTConfig)  # the SFT warm-up of both roles
    dualplay: DemoDualPlayConfig = field(default_factory=DemoDualPlayConfig)  # the short RL run after SFT
    eval: DemoEvalConfig = field(default_factory=DemoEvalConfig)  # the per-tier Solver evaluation
    run_dir: str | None = None  # output directory (None: runs/demo-<date>-<time>)
    cache_dir: str | None = None  # SFT model cache (None: $PASODOBLE_CACHE, else ~/.cache/pasodoble)
    fresh: bool = False  # ignore the cache: build the world and SFT inside the run directory


QUICK_RECIPE = "recipes/smollm2-135m-demo-quick.yaml"


def _small_world() -> WorldConfig:
    """The tiny world's task at a size one core gets through: a few hundred SFT examples, 16 problems per tier."""
    return WorldConfig(
        corpus_size=200,
        tier_size=16,
        sft_solver_examples=800,
        sft_proposer_examples=160,
        select=SelectConfig(every=0),
    )


@dataclass
class RealDemoConfig:
    model: str = "pkg:smollm2-135m-instruct"  # the real model both roles start from (pkg: spec or HF folder)
    world: WorldConfig = field(default_factory=_small_world)  # the task: corpus, tiers, teacher data sizes
    sft: SFTConfig = field(  # the cold start: full fine-tune of one model on both roles' teacher data
        default_factory=lambda: SFTConfig(max_steps=40, batch_size=8, lr=1e-4, warmup_steps=4, log_every=5)
    )
    dualplay: DemoDualPlayConfig = field(  # online dual-play from the SFT model (its recipe and overrides)
        default_factory=lambda: DemoDualPlayConfig(steps=10, recipe="recipes/smollm2-135m-online.yaml")
    )
    eval: DemoEvalConfig = field(  # per-tier evaluation of the Solver, greedy and sampled
        default_factory=lambda: DemoEvalConfig(
            num_samples=4, max_new_tokens=176, problems_per_tier=10, batch_size=50
        )
    )
    seeds: list[int] = field(default_factory=lambda: [0])  # dual-play seeds, all from the same SFT start
    # which dual-play runs per seed: "dualplay" (the method) and/or "random_reward" (control: coin-flip Solver reward)
    conditions: list[str] = field(default_factory=lambda: ["dualplay"])
    sft_from: str | None = (
        None  # a finished cold start (HF folder) to start from; None: train it (the sft phase)
    )
    run_dir: str | None = None  # output directory (None: runs/demo-real-<date>-<time>)
    cache_dir: str | None = (
        None  # model cache for pkg: specs (None: $PASODOBLE_CACHE, else ~/.cache/pasodoble)
    )

    def validate(self) -> None:
        self.world.validate()
        self.sft.validate()
        self.dualplay.validate()
        self.eval.validate()
        if self.world.select.every:
            raise ConfigError("world.select.every", "the real demo has no SFT stop rule; set it to 0")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError("seeds", f"give one or more distinct seeds, e.g. [0, 1, 2]; got {self.seeds}")
        unknown = sorted(set(self.conditions) - set(CONDITIONS))
        if unknown or not self.conditions or len(set(self.conditions)) != len(self.conditions):
            raise ConfigError(
                "conditions", f"use one or both of {', '.join(CONDITIONS)}; got {self.conditions}"
            )
        if self.sft_from is not None and not (Path(self.sft_from) / "config.json").is_file():
            raise ConfigError(
                "sft_from",
                f"{self.sft_from} is not a model folder (no config.json); give an earlier run's checkpoints/sft",
            )

    def runs(self) -> list[tuple[str, str, int]]:
        """(folder name, condition, seed) of each dual-play run; one plain run keeps the folder `dualplay`."""
        pairs = [(c, s) for c in self.conditions for s in self.seeds]
        if pairs == [("dualplay", self.seeds[0])]:
            return [("dualplay", "dualplay", self.seeds[0])]
        return [(f"{c}-seed{s}", c, s) for c, s in pairs]


@dataclass
class QAEvalConfig:
    num_samples: int = 8  # sampled answers per question (avg@k)
    temperature: float = 1.0  # temperature of the sampled evaluation (greedy runs too)
    max_new_tokens: int = 24  # answers are a few words
    batch_size: int = 128  # sequences per generate call
    seed: int = 0  # sampling seed

    def validate(self) -> None:
        if self.num_samples < 1 or self.max_new_tokens < 1:
            raise ConfigError("eval.num_samples", "num_samples and max_new_tokens must be at least 1")


def _qa_train() -> TrainConfig:
    return TrainConfig(domain="qa")


@dataclass
class QADemoConfig:
    warm_up: QAWarmUp = field(default_factory=QAWarmUp)  # the QA world and its cold start
    train: TrainConfig = field(
        default_factory=_qa_train
    )  # the dual-play run (models, corpus, seed: filled in)
    seeds: list[int] = field(default_factory=lambda: [0])  # dual-play seeds, all from the same SFT start
    # which runs per seed: "dualplay" (the method) and/or "random_reward" (the control: a coin-flip Solver reward)
    conditions: list[str] = field(default_factory=lambda: ["dualplay"])
    eval: QAEvalConfig = field(default_factory=QAEvalConfig)  # the per-tier closed-book evaluation
    run_dir: str | None = None  # output folder (None: runs/demo-qa-<date>-<time>)
    cache_dir: str | None = None  # SFT model cache (None: $PASODOBLE_CACHE, else ~/.cache/pasodoble)

    def validate(self) -> None:
        if self.train.domain != "qa":
            raise ConfigError("train.domain", f"the QA demo plays the qa domain, got {self.train.domain!r}")
        if not self.seeds:
            raise ConfigError("seeds", "give at least one dual-play seed, e.g. [0, 1, 2]")
        unknown = sorted(set(self.conditions) - set(CONDITIONS))
        if unknown or not self.conditions:
            raise ConfigError(
                "conditions", f"use one or both of {', '.join(CONDITIONS)}; got {self.conditions}"
            )


def find_recipe(recipe: str) -> Path:
    """`dualplay.recipe` as a file: the path as given, else under the clone's root (a demo run from another
    folder)."""
    path = Path(recipe)
    if not path.is_file() and not path.is_absolute():
        path = REPO / path
    if not path.is_file():
        raise ConfigError(
            "dualplay.recipe", f"{path} not found; run from the repository root or give its path"
        )
    return path
