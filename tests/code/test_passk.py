import math

import pytest

from pasodoble.code.passk import mean_pass_at_k


@pytest.mark.parametrize("n,c,k", [(10, 3, 1), (10, 3, 5), (200, 17, 10), (5, 0, 2), (5, 5, 5), (7, 6, 2)])
def test_matches_the_combinatorial_formula(n, c, k):
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert mean_pass_at_k([(n, c)], k) == pytest.approx(exact, abs=1e-12)


def test_mean_over_problems_and_undefined_when_k_exceeds_the_samples():
    assert mean_pass_at_k([(10, 3), (10, 0)], 1) == pytest.approx(0.15)
    assert mean_pass_at_k([(2, 1), (2, 2)], 1) == pytest.approx(0.75)
    assert mean_pass_at_k([(2, 1), (1, 1)], 2) is None
    assert mean_pass_at_k([], 1) is None
