"""pass@k over problems from (n samples, c correct) pairs, with the unbiased estimator in `evals.metrics`.

    mean_pass_at_k([(10, 3), (10, 0)], k=1) == 0.15

Per problem 1 - C(n - c, k) / C(n, k) (Chen et al., 2021); a problem with fewer than k samples leaves pass@k
undefined (None) rather than estimated from fewer draws.
"""

from __future__ import annotations

from collections.abc import Iterable

from pasodoble.evals.metrics import pass_at_k


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """The mean over problems of pass@k; None when there are none or any has fewer than k samples."""
    counts = list(counts)
    if not counts or any(n < k for n, _ in counts):
        return None
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
