"""avg@k, unbiased pass@k, maj@k and the 95% interval on literal inputs."""

from math import comb

import pytest

from pasodoble.evals.metrics import average_sources, majority_correct, mean_and_ci95, pass_at_k, score_source


@pytest.mark.parametrize(
    "n,c,k", [(6, 0, 1), (6, 1, 1), (6, 3, 2), (6, 5, 6), (10, 2, 5), (16, 4, 8), (6, 6, 3)]
)
def test_pass_at_k_matches_the_binomial_formula(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_1_is_the_fraction_correct_and_pass_at_n_is_any():
    assert pass_at_k(6, 2, 1) == pytest.approx(2 / 6)
    assert pass_at_k(6, 1, 6) == 1.0
    assert pass_at_k(6, 0, 6) == 0.0


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_majority_counts_correct_samples_as_one_cluster():
    # "1/2" and "0.5" are both correct: together they beat "3" and "4" (string clusters would tie 1-1-1-1).
    assert majority_correct([True, True, False, False], ["1/2", "0.5", "3", "4"]) is True
    assert (
        majority_correct([True, False, False], ["1/2", "3", " 3"]) is False
    )  # whitespace-insensitive clusters
    assert majority_correct([True, False, False], ["1/2", "3", "4"]) is False  # tie counts as wrong
    assert majority_correct([True, False, False], ["1/2", None, None]) is True  # no answer does not vote
    assert majority_correct([False, False], ["1", "2"]) is False


def test_mean_and_ci95():
    assert mean_and_ci95([]) == (0.0, 0.0)
    assert mean_and_ci95([1.0]) == (1.0, 0.0)
    mean, half = mean_and_ci95([0.0, 1.0, 0.0, 1.0])
    assert mean == 0.5
    assert half == pytest.approx(1.959964 * (1 / 3) ** 0.5 / 2, rel=1e-5)


def test_score_source_and_average():
    samples = [([True, True], ["2", "2"]), ([True, False], ["1", "5"]), ([False, False], ["7", None])]
    scores = score_source(samples, k=2)
    assert scores["avg@k"] == pytest.approx(0.5)
    assert scores["pass@k"] == pytest.approx(2 / 3)
    assert scores["maj@k"] == pytest.approx(1 / 3)
    assert scores["n"] == 3 and scores["k"] == 2
    other = score_source([([True, True], ["1", "1"])], k=2)
    avg = average_sources({"a": scores, "b": other})
    assert avg["avg@k"] == pytest.approx((0.5 + 1.0) / 2)  # unweighted over sets, as in the paper's AVG
    assert avg["n"] == 4
    with pytest.raises(ValueError):
        score_source([([True], ["1"])], k=2)
