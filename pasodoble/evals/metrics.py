"""Scores over k samples per problem: avg@k, unbiased pass@k, maj@k, and a 95% interval over problems.

Why: the paper reports "pass@1 as the mean of k samples" (= avg@k here); peers also quote pass@k and majority
vote. All are pure functions of per-sample correctness (and, for maj@k, the extracted answers).

- avg@k: mean over problems of (correct samples / k); the unbiased estimate of pass@1.
- pass@k: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), with n samples and c correct;
  with k = n it is "any sample correct".
- maj@k: majority vote over the k extracted answers. Correct samples all equal the gold, so they form one cluster;
  wrong samples are clustered by their extracted string (whitespace removed). The vote is correct when the correct
  cluster is strictly larger than every wrong cluster; a tie counts as wrong (deterministic, no dependence on
  sample order). Samples with no extracted answer do not vote. Peers cluster by string only, which splits
  "1/2" and "\\frac{1}{2}"; this departure avoids that for the correct cluster.
- em, f1 (QA grading only, `pasodoble eval --grading qa`): as SQuAD's script reports them, the mean over questions
  of the best exact match / token F1 over the gold answers (with k samples, each question's mean over them);
  em equals avg@k.
- ci95: half-width of the normal 95% interval of avg@k over problems (1.96 * sample std / sqrt(n)), 0 for n < 2.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Z95 = 1.959963984540054


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k for one problem (Chen et al. 2021), computed as a stable product."""
    if not 0 <= num_correct <= num_samples or not 1 <= k <= num_samples:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={num_samples}, c={num_correct}, k={k}")
    if num_samples - num_correct < k:
        return 1.0
    miss = 1.0
    for i in range(num_samples - num_correct + 1, num_samples + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def majority_correct(correct: Sequence[bool], extracted: Sequence[str | None]) -> bool:
    """maj@k verdict of one problem (see the module docstring for the clustering rule)."""
    num_correct = sum(correct)
    if num_correct == 0:
        return False
    wrong = Counter(
        "".join(answer.split())
        for ok, answer in zip(correct, extracted, strict=True)
        if not ok and answer is not None
    )
    return num_correct > max(wrong.values(), default=0)


def mean_and_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and normal-approximation 95% half-width over independent values."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, Z95 * math.sqrt(var / n)


def score_source(samples: Sequence[tuple[Sequence[bool], Sequence[str | None]]], k: int) -> dict[str, float]:
    """Metrics of one benchmark from (correct flags, extracted answers) per problem, each with k samples."""
    if any(len(correct) != k for correct, _ in samples):
        raise ValueError(f"every problem needs exactly k={k} samples")
    accuracies = [sum(correct) / k for correct, _ in samples]
    avg, ci95 = mean_and_ci95(accuracies)
    n = len(samples)
    passes = [pass_at_k(k, sum(correct), k) for correct, _ in samples]
    majority = [majority_correct(correct, extracted) for correct, extracted in samples]
    return {
        "avg@k": avg,
        "pass@k": sum(passes) / n if n else 0.0,
        "maj@k": sum(majority) / n if n else 0.0,
        "ci95": ci95,
        "n": float(n),
        "k": float(k),
    }


def average_sources(per_source: dict[str, dict[str, float]]) -> dict[str, float]:
    """Unweighted mean over benchmarks (the paper's AVG column); the interval combines the per-set errors."""
    if not per_source:
        return {}
    rows = list(per_source.values())
    count = len(rows)
    average = {key: sum(r[key] for r in rows) / count for key in ("avg@k", "pass@k", "maj@k")}
    for key in ("em", "f1"):
        if all(key in r for r in rows):
            average[key] = sum(r[key] for r in rows) / count
    average["ci95"] = math.sqrt(sum(r["ci95"] ** 2 for r in rows)) / count
    average["n"] = float(sum(r["n"] for r in rows))
    average["k"] = rows[0]["k"]
    return average


def add_qa_scores(scores: dict[str, dict[str, float]], problems: Sequence, rows_by_key: dict) -> None:
    """Add em and f1 to each source's scores when its sample rows carry an F1 (QA grading); else leave them."""
    f1_by_source: dict[str, list[float]] = {}
    for p in problems:
        rows = rows_by_key[(p.source, p.id)]
        if any("f1" not in r for r in rows):
            return
        f1_by_source.setdefault(p.source, []).append(sum(float(r["f1"]) for r in rows) / len(rows))
    for source, values in f1_by_source.items():
        scores[source]["em"] = scores[source]["avg@k"]
        scores[source]["f1"] = sum(values) / len(values)
