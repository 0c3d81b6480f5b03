"""pass@k with the unbiased estimator of Chen et al. (2021): n samples per problem, c of them correct.

    pass_at_k(n=10, c=3, k=1) == 0.3

1 - C(n - c, k) / C(n, k), computed as a product so large n never overflows; k > n is undefined (None).
"""

from __future__ import annotations

from collections.abc import Iterable


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if k < 1 or n < k:
        return None
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """The mean over problems of pass@k from (n, c) pairs; None when any problem has fewer than k samples."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values or any(v is None for v in values):
        return None
    return sum(values) / len(values)
