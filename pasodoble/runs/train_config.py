"""`TrainConfig`, the config of `pasodoble train` (one dataclass per concern: proposer/solver `RoleConfig`,
`ScheduleConfig`, `RewardConfig`, `PromptConfig`, `KnowledgeConfig`, `GraderConfig`, optional in-training
`EvalConfig`, logging, ...), and `resume_changes`, the check of a resume's overrides against the run's config.

Why apart from `train.py` (which re-exports them): every section is read and checked without torch, so that the
command line answers a mistyped key or a bad value before it imports the training code.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from pasodoble.accel_config import AccelConfig
from pasodoble.core.knowledge import KnowledgeConfig
from pasodoble.core.prompts import PromptConfig
from pasodoble.core.rewards import RewardConfig
from pasodoble.domains import get_domain
from pasodoble.domains.labels import LabelConfig
from pasodoble.errors import ConfigError
from pasodoble.evals.settings import EvalConfig
from pasodoble.grader.config import GraderConfig
from pasodoble.roles.config import RoleConfig, RolesConfig, check_shared_base
from pasodoble.scale.config import DistributedConfig, has_proposer
from pasodoble.schedule import ScheduleConfig
from pasodoble.sft.config import SFTConfig
from pasodoble.world.config import WorldConfig

TINY = "tiny:"
TINY_TIERS = "tiny:tiers"  # eval.problems_file value: the tiny world's held-out tier problems


@dataclass
class OracleConfig:
    tiers: list[str] = field(
        default_factory=lambda: ["t1", "t2", "t3", "t4"]
    )  # tiny-world tiers to draw from (source: generate)
    source: str = (
        "generate"  # "generate": fresh training-side questions of `tiers`; "corpus": the world's facts
    )

    def validate(self) -> None:
        if self.source not in ("generate", "corpus"):
            raise ConfigError("oracle.source", f"unknown {self.source!r}; use generate or corpus")


@dataclass
class LoggingConfig:
    tensorboard: bool = False  # also write TensorBoard event files
    wandb_project: str | None = None  # also log to Weights & Biases (None: off)
    quiet: bool = False  # no per-step console line


@dataclass
class TrainConfig:
    run_dir: str | None = None  # output folder (None: runs/train-<date>-<time>)
    domain: str = "math"  # what the game is about: a registered domain (pasodoble.domains)
    seed: int = 0  # seeds every stochastic choice: sampling, passages, random rewards
    num_threads: int | None = (
        None  # torch CPU threads (None: every CPU this process may use; 1 on a busy machine)
    )
    cache_dir: str | None = (
        None  # tiny-world and pkg: model cache (None: $PASODOBLE_CACHE, else ~/.cache/pasodoble)
    )
    proposer: RoleConfig = field(
        default_factory=lambda: RoleConfig(model="tiny:proposer", max_prompt_length=1280)
    )
    solver: RoleConfig = field(default_factory=lambda: RoleConfig(model="tiny:solver", max_prompt_length=512))
    schedule: ScheduleConfig = field(
        default_factory=ScheduleConfig
    )  # online/offline/oracle, steps, checkpoints
    rewards: RewardConfig = field(default_factory=RewardConfig)  # reward names and thresholds
    labels: LabelConfig = field(default_factory=LabelConfig)  # label check (wrong_label) and injected noise
    prompts: PromptConfig = field(default_factory=PromptConfig)  # both roles' prompt templates
    knowledge: KnowledgeConfig = field(
        default_factory=KnowledgeConfig
    )  # corpus (path None + tiny models: world's)
    grader: GraderConfig = field(default_factory=GraderConfig)  # answer checking
    eval: EvalConfig | None = (
        None  # in-training Solver evaluation every schedule.eval_every steps (None: off)
    )
    oracle: OracleConfig = field(default_factory=OracleConfig)  # oracle mode's question source
    world: WorldConfig = field(default_factory=WorldConfig)  # the tiny world behind tiny: model specs
    sft: SFTConfig = field(default_factory=SFTConfig)  # the SFT warm-up behind tiny: model specs
    logging: LoggingConfig = field(default_factory=LoggingConfig)  # metric sinks
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # ranks, sharding, GPU layout
    roles: RolesConfig = field(default_factory=RolesConfig)  # how the two roles share weights (shared_base)
    accel: AccelConfig = field(
        default_factory=AccelConfig
    )  # the CPU fast paths, a key each (auto | on | off)

    def validate(self) -> None:
        get_domain(self.domain)
        self._map_role_cpu_matmul()
        if self.roles.shared_base:
            check_shared_base(self.proposer, self.solver)
        if self.schedule.eval_every is not None and self.eval is None:
            raise ConfigError("schedule.eval_every", "needs an eval section (eval.problems_file)")
        uses_tiny = any(m.startswith(TINY) for m in (self.proposer.model, self.solver.model))
        needs_corpus = has_proposer(self) and not self.schedule.no_knowledge
        if self.knowledge.path is None and not uses_tiny and needs_corpus:
            raise ConfigError(
                "knowledge.path", "give a corpus (JSONL/Parquet/text/hf:...) or set no_knowledge"
            )

    def _map_role_cpu_matmul(self) -> None:
        """The deprecated `<role>.cpu_matmul` becomes `accel.cpu_matmul`, with a one-line note."""
        chosen = {
            n: r.cpu_matmul for n, r in (("proposer", self.proposer), ("solver", self.solver)) if r.cpu_matmul
        }
        if not chosen:
            return
        if len(set(chosen.values())) > 1:
            raise ConfigError(
                "solver.cpu_matmul", "is deprecated and set apart per role; set accel.cpu_matmul once"
            )
        for name, value in chosen.items():
            print(
                f"pasodoble: {name}.cpu_matmul is deprecated; use accel.cpu_matmul={value}", file=sys.stderr
            )
        if self.accel.cpu_matmul == "auto":
            self.accel.cpu_matmul = next(iter(chosen.values()))


def _lora_shape(role: RoleConfig):
    return None if role.lora is None else (role.lora.rank, sorted(role.lora.target_modules))


def resume_changes(saved: TrainConfig, cfg: TrainConfig) -> tuple[str | None, list[str]]:
    """(refusal, notes) for a resume of the run `saved` with the config `cfg`: a change of what a checkpoint's
    weight shapes follow (LoRA rank or target modules, LoRA on or off, a shared base) is refused in one line;
    a change of `num_generations` is named in a note (the resumed run no longer repeats an uninterrupted one)."""
    if saved.roles.shared_base != cfg.roles.shared_base:
        return (
            f"roles.shared_base={str(cfg.roles.shared_base).lower()} differs from the run's "
            f"{str(saved.roles.shared_base).lower()}",
            [],
        )
    notes = []
    for name in ("proposer", "solver"):
        old, new = getattr(saved, name), getattr(cfg, name)
        if _lora_shape(old) != _lora_shape(new):
            if old.lora is None or new.lora is None:
                was = "a full model" if old.lora is None else "a LoRA adapter"
                return f"{name}.lora differs: the run's checkpoints hold {was}", []
            field_ = "rank" if old.lora.rank != new.lora.rank else "target_modules"
            was, now = getattr(old.lora, field_), getattr(new.lora, field_)
            return f"{name}.lora.{field_}={now} differs from the run's {was} (the LoRA shape)", []
        if old.num_generations != new.num_generations:
            notes.append(
                f"note: {name}.num_generations changes from {old.num_generations} to {new.num_generations} "
                "on resume; the run goes on with the new group size"
            )
    return None, notes
