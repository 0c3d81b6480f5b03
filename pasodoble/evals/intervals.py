"""Confidence intervals for a change in accuracy: paired bootstrap per run, hierarchical bootstrap, seed-level t.

What, for scores per problem (1/0 greedy, or a sampled pass rate) before and after training on the SAME problems:
    paired_bootstrap(before, after)      the mean change and its 95% percentile interval, problems resampled with
                                         replacement (10,000 resamples), each resample keeping the pairs together
    hierarchical_bootstrap(runs)         runs = [(before, after), ...] one per seed: resample seeds, then problems
                                         inside each drawn seed; the interval of the mean change over seeds
    seed_t_interval(deltas)              mean change over seeds +- t(0.975, n-1) * sd / sqrt(n)
Each returns an `Interval(estimate, low, high, n)`; `verdict(interval)` reads it in words. `scores_by_problem`
reads an evaluation's samples file into the per-problem scores these take.

Why: at 100 problems a tier one problem is one point, and a single seed's change of a few points is noise; a
claim needs an interval. The paired bootstrap answers "did this run move on these problems"; the hierarchical one
adds seed-to-seed variation (what a reader who reruns the experiment with new seeds would see); the t interval is
the classical seed-level check (wide at 3 seeds: t = 4.30).

Seeded (numpy's default_rng(seed)), so a summary is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from pasodoble.io import read_jsonl

RESAMPLES = 10_000
LEVEL = 0.95
# Two-sided 97.5% quantiles of Student's t by degrees of freedom (the standard table); past 30: the normal's.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
    29: 2.045, 30: 2.042,
}  # fmt: skip


@dataclass(frozen=True)
class Interval:
    estimate: float  # the point estimate (mean change)
    low: float  # lower end of the 95% interval
    high: float  # upper end
    n: int  # problems (paired), seeds (hierarchical, t)

    def as_dict(self) -> dict:
        """JSON-ready: an unbounded end (the t interval of one seed) becomes None."""
        return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in asdict(self).items()}


def _pairs(before: Sequence[float], after: Sequence[float]) -> np.ndarray:
    if len(before) != len(after) or not before:
        raise ValueError(f"paired scores need the same non-empty problems ({len(before)} vs {len(after)})")
    return np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)


def _percentiles(values: np.ndarray) -> tuple[float, float]:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def paired_bootstrap(
    before: Sequence[float], after: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """Mean of after - before and its percentile interval over `resamples` resamples of the problems."""
    diff = _pairs(before, after)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(resamples, len(diff)))
    low, high = _percentiles(diff[idx].mean(axis=1))
    return Interval(float(diff.mean()), low, high, len(diff))


def hierarchical_bootstrap(
    runs: Sequence[tuple[Sequence[float], Sequence[float]]], *, resamples: int = RESAMPLES, seed: int = 0
) -> Interval:
    """Mean over seeds of each seed's mean change; each resample draws seeds with replacement, then problems
    with replacement inside every drawn seed."""
    diffs = [_pairs(b, a) for b, a in runs]
    if not diffs:
        raise ValueError("hierarchical bootstrap needs at least one run")
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = np.zeros(resamples)
    for s, diff in enumerate(diffs):
        # every (resample, slot) that drew seed s gets its own resample of seed s's problems
        slots = np.argwhere(seeds == s)
        if len(slots):
            idx = rng.integers(0, len(diff), size=(len(slots), len(diff)))
            np.add.at(means, slots[:, 0], diff[idx].mean(axis=1))
    means /= len(diffs)
    low, high = _percentiles(means)
    return Interval(float(np.mean([d.mean() for d in diffs])), low, high, len(diffs))


def t_quantile(df: int) -> float:
    return _T975.get(df, 1.960) if df >= 1 else math.inf


def seed_t_interval(deltas: Sequence[float]) -> Interval:
    """Mean +- t(0.975, n-1) * sd / sqrt(n) over per-seed changes; one seed: an unbounded interval."""
    values = np.asarray(deltas, dtype=np.float64)
    if not len(values):
        raise ValueError("a t interval needs at least one seed")
    mean = float(values.mean())
    if len(values) < 2:
        return Interval(mean, -math.inf, math.inf, 1)
    half = t_quantile(len(values) - 1) * float(values.std(ddof=1)) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def verdict(interval: Interval) -> str:
    """The interval in words: "above the start", "below the start" or "within noise" (None: unbounded)."""
    if interval.low is not None and interval.low > 0:
        return "above the start"
    if interval.high is not None and interval.high < 0:
        return "below the start"
    return "within noise"


def points(interval: Interval) -> str:
    """`+3.5 [+0.4, +6.6]` in points (accuracy x 100); an unbounded end is written as such."""

    def end(x: float | None) -> str:
        return "unbounded" if x is None or math.isinf(x) else f"{100 * x:+.1f}"

    return f"{100 * interval.estimate:+.1f} [{end(interval.low)}, {end(interval.high)}]"


def scores_by_problem(samples_path: Path) -> dict[str, float]:
    """`<source>/<id>` -> mean correctness of its samples (1/0 greedy), from an evaluation's samples.jsonl."""
    rows: dict[str, list[float]] = {}
    for row in read_jsonl(samples_path):
        rows.setdefault(f"{row['source']}/{row['id']}", []).append(float(bool(row["correct"])))
    return {key: sum(v) / len(v) for key, v in sorted(rows.items())}


def paired_scores(
    before: dict[str, float], after: dict[str, float], prefix: str = ""
) -> tuple[list[float], list[float]]:
    """Two runs' `scores_by_problem` on the keys starting with `prefix` (a tier: "t3/"), in one problem order."""
    keys = sorted(k for k in before if k.startswith(prefix))
    if keys != sorted(k for k in after if k.startswith(prefix)):
        raise ValueError(f"the two evaluations hold different problems under {prefix!r}")
    return [before[k] for k in keys], [after[k] for k in keys]


def paired_by_key(
    before: dict[str, float], after: dict[str, float], prefix: str = "", seed: int = 0
) -> Interval:
    """Paired bootstrap of two runs' `scores_by_problem` on the keys starting with `prefix`."""
    return paired_bootstrap(*paired_scores(before, after, prefix), seed=seed)


def change_rows(scores: Sequence[dict[str, float]], labels: Sequence[str]) -> list[str]:
    """Markdown rows: each run after the first against the first, per source, as `points` with the verdict.
    A source whose problems differ between the two runs is marked as not paired."""
    sources = sorted({key.split("/", 1)[0] for key in scores[0]})
    lines = ["| Change vs " + labels[0] + " | " + " | ".join(sources) + " |", "|---|" + "---|" * len(sources)]
    for run, label in zip(scores[1:], labels[1:]):
        cells = []
        for source in sources:
            try:
                iv = paired_by_key(scores[0], run, prefix=f"{source}/")
                cells.append(f"{points(iv)} {verdict(iv)}")
            except ValueError:
                cells.append("not paired (other problems)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
