"""The `schedule:` config section: the dual-play loop's mode, steps, phases, buffer, diversity and its cadences
(evaluation, checkpoints, samples).

Apart from `dualplay.py` (which re-exports it) so that a recipe is read and checked before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from pasodoble.errors import ConfigError

MODES = ("online", "offline", "oracle")


@dataclass
class ScheduleConfig:
    mode: str = "online"  # "online" | "offline" | "oracle" (Solver-only GRPO on true answers: a control)
    steps: int = 2000  # online/oracle steps, or offline outer iterations (paper: 2000 online, 200 offline)
    proposer_phase_updates: int = 10  # offline: successful Proposer updates per Proposer phase
    proposer_phase_max_attempts: int | None = (
        None  # offline: cap on Proposer-phase steps (None: unbounded, as paper)
    )
    solver_phase_updates: int = 5  # offline: Solver updates per Solver phase
    solver_batch_questions: int = 6  # offline: buffer questions per Solver update
    buffer_max_size: int | None = (
        None  # offline: question buffer capacity (None: unbounded, as the reference)
    )
    buffer_eviction: str = "none"  # offline: "none" (reference) | "fifo"
    passages_per_step: int = 1  # passages (Proposer groups) per step; 1 = paper, more for small models
    oracle_questions: int = 32  # oracle mode: true-answer questions per step
    history_size: int = 100  # diversity: questions kept in the history (H)
    similarity_threshold: float = 0.8  # diversity: Jaccard above this counts as a repeat
    no_knowledge: bool = False  # ablation: Proposer prompt without a passage
    eval_every: int | None = None  # outer steps between evaluations (None: off)
    checkpoint_every: int | None = 40  # outer steps between checkpoints (None: only at the end)
    keep_last: int | None = 3  # checkpoints kept (None: all)
    samples_every: int | None = 10  # inner steps between rollout-sample dumps to samples.jsonl (None: off)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("schedule.mode", f"unknown {self.mode!r}; use one of {', '.join(MODES)}")
        if self.steps < 0:
            raise ConfigError("schedule.steps", "must be >= 0")
        if self.buffer_eviction not in ("none", "fifo"):
            raise ConfigError("schedule.buffer_eviction", "use 'none' or 'fifo'")
        if self.buffer_eviction == "fifo" and self.buffer_max_size is None:
            raise ConfigError("schedule.buffer_max_size", "fifo eviction needs a buffer_max_size")
        for name in (
            "proposer_phase_updates",
            "solver_phase_updates",
            "solver_batch_questions",
            "passages_per_step",
            "oracle_questions",
            "history_size",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"schedule.{name}", "must be >= 1")
        for name in (
            "proposer_phase_max_attempts",
            "eval_every",
            "checkpoint_every",
            "keep_last",
            "samples_every",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"schedule.{name}", "must be >= 1, or null to switch it off")
        if not 0 <= self.similarity_threshold <= 1:
            raise ConfigError("schedule.similarity_threshold", "must be in [0, 1]")
