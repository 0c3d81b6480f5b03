"""Per-step metrics of the dual-play loop, as plain functions of one step's values.

What: turns a step's proposals, pass rates, diversities, rewards and completions into the flat `role/group/name`
dictionary that goes to `metrics.jsonl` and the console line. Wall-clock numbers live under `time/` and
process-local counters (caches) under `proc/`: those two prefixes legitimately differ between an uninterrupted run
and a resumed one; every other key must match exactly.

Why a separate module: keeps `dualplay.py` readable as the algorithm, and these functions testable on literals.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

# Grader counters whose values depend on the process (its cache: a resumed process starts cold; a hung worker), not
# on the run's inputs; logged under proc/.
PROCESS_LOCAL_COUNTERS = frozenset(
    {"cache_hits", "fast_path", "math_verify", "worker_restarts", "wall_timeouts"}
)
NON_DETERMINISTIC_PREFIXES = ("time/", "proc/")


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def pass_rate_bins(rates: Sequence[float], low: float) -> dict[str, float]:
    """Histogram of pass rates in the bands the method acts on: 0, (0, low], (low, 1), 1."""
    bins = Counter()
    for p in rates:
        if p <= 0:
            bins["eq0"] += 1
        elif p <= low:
            bins["low"] += 1
        elif p < 1:
            bins["learnable"] += 1
        else:
            bins["eq1"] += 1
    total = max(len(rates), 1)
    return {f"proposer/pass_rate_hist/{k}": bins[k] / total for k in ("eq0", "low", "learnable", "eq1")}


def proposer_metrics(
    proposals: Sequence,
    rates: Sequence[float],
    diversity: Sequence[float],
    rewards: Sequence[float],
    question_lens: Sequence[int],
    completion_lens: Sequence[int],
    *,
    pass_rate_low: float,
) -> dict[str, float]:
    """Proposer side of a step: reward and its parts, validity with reasons, lengths, pass-rate histogram."""
    valid = [p.invalid_reason is None for p in proposals]
    valid_rates = [r for r, v in zip(rates, valid) if v]
    out = {
        "proposer/reward/mean": mean(rewards),
        "proposer/reward/max": max(rewards) if rewards else 0.0,
        "proposer/valid/fraction": mean([float(v) for v in valid]),
        "proposer/pass_rate/mean": mean(valid_rates),
        "proposer/diversity/mean": mean([d for d, v in zip(diversity, valid) if v]),
        "proposer/question_len_tokens/mean": mean(question_lens),
        "proposer/completion_len_tokens/mean": mean(completion_lens),
        **pass_rate_bins(valid_rates, pass_rate_low),
    }
    reasons = Counter(p.invalid_reason for p in proposals if p.invalid_reason is not None)
    for reason, count in sorted(reasons.items()):
        out[f"proposer/invalid/{reason}"] = float(count)
    return out


def no_answer_fraction(answered: Sequence[Sequence[bool]]) -> dict[str, float]:
    """`solver/no_answer/fraction`: the Solver's answers with nothing to extract (absent when none were made)."""
    flat = [a for row in answered for a in row]
    return {"solver/no_answer/fraction": mean([float(not a) for a in flat])} if flat else {}


def grader_metrics(counters: dict[str, int]) -> dict[str, float]:
    """Grader counters: deterministic ones under grader/, cache-dependent ones under proc/grader/."""
    out = {}
    for name, value in sorted(counters.items()):
        prefix = "proc/grader/" if name in PROCESS_LOCAL_COUNTERS else "grader/"
        out[prefix + name] = float(value)
    return out


def role_update_metrics(role: str, stats: dict[str, float] | None) -> dict[str, float]:
    """An update's statistics as `<role>/update/<name>`; its duration under time/."""
    if not stats:
        return {f"{role}/update/applied": 0.0}
    out = {f"{role}/update/applied": 1.0}
    for name, value in stats.items():
        key = ROLE_KEYS[name].format(role=role) if name in ROLE_KEYS else f"{role}/update/{name}"
        out[key] = float(value)
    return out


# Update statistics logged outside `<role>/update/`: wall-clock under time/, the engine/trainer gap as its own group.
ROLE_KEYS = {
    "update_s": "time/{role}/update_s",
    "weight_sync_s": "time/{role}/weight_sync_s",
    "logprob_diff_mean": "{role}/logprob_diff/mean",
    "logprob_diff_max": "{role}/logprob_diff/max",
}


def rollout_totals(row: dict) -> dict[str, float]:
    """Both roles together: `time/weight_sync_s` (sum) and `rollout/logprob_diff/mean|max` (mean / max)."""
    out: dict[str, float] = {}
    syncs = [v for k, v in row.items() if k.startswith("time/") and k.endswith("/weight_sync_s")]
    if syncs:
        out["time/weight_sync_s"] = float(sum(syncs))
    means = [v for k, v in row.items() if k.endswith("/logprob_diff/mean") and not k.startswith("rollout/")]
    maxes = [v for k, v in row.items() if k.endswith("/logprob_diff/max") and not k.startswith("rollout/")]
    if means:
        out["rollout/logprob_diff/mean"] = float(sum(means) / len(means))
        out["rollout/logprob_diff/max"] = float(max(maxes))
    return out


def deterministic(row: dict) -> dict:
    """The part of a metrics row that must be identical between an uninterrupted and a resumed run."""
    return {k: v for k, v in row.items() if not k.startswith(NON_DETERMINISTIC_PREFIXES)}


def console_line(step: int, total: int, row: dict, elapsed_s: float, eta_s: float) -> str:
    """One concise line per step: step, rewards, pass rate, valid fraction, skips, seconds, ETA."""
    parts = [f"step {step}/{total}"]
    if "phase" in row:
        parts.append(str(row["phase"]))
    for key, label in (
        ("proposer/reward/mean", "P.r"),
        ("proposer/pass_rate/mean", "p"),
        ("proposer/valid/fraction", "valid"),
        ("proposer/diversity/mean", "div"),
        ("solver/reward/mean", "S.r"),
        ("skip/rate", "skip"),
    ):
        if key in row:
            parts.append(f"{label}={row[key]:.2f}")
    parts.append(f"{elapsed_s:.1f}s ETA {eta_s / 60:.1f}m")
    return " | ".join(parts)


class Timer:
    """Wall-clock seconds per phase and generated tokens per role, reported under time/."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.tokens: dict[str, int] = {}
        self.start = time.perf_counter()

    def __call__(self, phase: str):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + time.perf_counter() - self.t0

        return _Span()

    def add_tokens(self, role: str, n: int) -> None:
        self.tokens[role] = self.tokens.get(role, 0) + n

    def metrics(self) -> dict[str, float]:
        out = {f"time/{k}_s": v for k, v in self.seconds.items()}
        for role, phase in (("proposer", "propose"), ("solver", "solve")):
            if role in self.tokens and self.seconds.get(phase):
                out[f"time/{role}/tokens_per_s"] = self.tokens[role] / self.seconds[phase]
        out["time/step_s"] = time.perf_counter() - self.start
        return out
