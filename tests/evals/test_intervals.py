"""Bootstrap and t intervals against cases whose answer is known or derived independently."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pasodoble.evals.intervals import (
    Interval,
    hierarchical_bootstrap,
    paired_bootstrap,
    points,
    seed_t_interval,
    verdict,
)


def test_constant_change_has_a_zero_width_interval():
    before, after = [0, 1, 0, 1] * 10, [1, 1, 1, 1] * 10
    # every change is 0 or +1: not constant; a constant change of +1:
    iv = paired_bootstrap([0] * 50, [1] * 50)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (1.0, 1.0, 1.0, 50)
    assert paired_bootstrap(before, after).estimate == pytest.approx(0.5)


def test_paired_bootstrap_matches_a_numpy_reference_and_the_normal_approximation():
    rng = np.random.default_rng(7)
    before = rng.integers(0, 2, size=300).tolist()
    after = rng.integers(0, 2, size=300).tolist()
    iv = paired_bootstrap(before, after, resamples=10_000, seed=3)
    diff = np.array(after) - np.array(before)
    ref = np.random.default_rng(3)
    means = diff[ref.integers(0, 300, size=(10_000, 300))].mean(axis=1)
    assert (iv.low, iv.high) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))
    # and close to mean +- 1.96 * sd / sqrt(n), the large-sample interval
    half = 1.96 * diff.std() / math.sqrt(300)
    assert iv.low == pytest.approx(diff.mean() - half, abs=0.01)
    assert iv.high == pytest.approx(diff.mean() + half, abs=0.01)


def test_pairs_are_kept_together():
    # after = before + 1 on every problem: the paired change is exactly +1 whatever the problems' spread
    before = list(np.linspace(0, 1, 40))
    iv = paired_bootstrap(before, [b + 1 for b in before])
    assert iv.low == pytest.approx(1.0) and iv.high == pytest.approx(1.0)


def test_hierarchical_bootstrap_of_constant_seeds_is_the_bootstrap_of_seed_means():
    # seeds whose every problem changed by 0, 0 and +1: means of 3 seeds drawn with replacement take 0 with
    # probability 8/27 (> 2.5%) and 1 with 1/27 (> 2.5%), so the 95% interval is [0, 1]
    runs = [([0] * 20, [0] * 20), ([0] * 20, [0] * 20), ([0] * 20, [1] * 20)]
    iv = hierarchical_bootstrap(runs)
    assert (iv.estimate, iv.low, iv.high, iv.n) == (pytest.approx(1 / 3), 0.0, 1.0, 3)


def test_hierarchical_bootstrap_of_one_seed_is_its_paired_bootstrap_width():
    rng = np.random.default_rng(1)
    before, after = rng.integers(0, 2, 200).tolist(), rng.integers(0, 2, 200).tolist()
    one = hierarchical_bootstrap([(before, after)])
    paired = paired_bootstrap(before, after)
    assert one.estimate == paired.estimate
    assert one.high - one.low == pytest.approx(paired.high - paired.low, rel=0.1)


def test_seed_t_interval_by_hand():
    iv = seed_t_interval([0.01, 0.02, 0.03])  # mean 0.02, sd 0.01, t(2) = 4.303
    half = 4.303 * 0.01 / math.sqrt(3)
    assert (iv.low, iv.high) == (pytest.approx(0.02 - half), pytest.approx(0.02 + half))
    single = seed_t_interval([0.05])
    assert single.low == -math.inf and single.high == math.inf


def test_verdicts_in_words():
    assert verdict(Interval(0.05, 0.01, 0.09, 3)) == "above the start"
    assert verdict(Interval(-0.05, -0.09, -0.01, 3)) == "below the start"
    assert verdict(Interval(0.02, -0.01, 0.05, 3)) == "within noise"
    assert points(Interval(0.035, 0.004, 0.066, 3)) == "+3.5 [+0.4, +6.6]"


def test_unpaired_input_is_refused():
    with pytest.raises(ValueError):
        paired_bootstrap([1, 0], [1])


def test_one_seed_t_interval_is_unbounded_in_json_and_words():
    iv = seed_t_interval([0.05])
    assert iv.as_dict() == {"estimate": 0.05, "low": None, "high": None, "n": 1}
    assert points(Interval(**iv.as_dict())) == "+5.0 [unbounded, unbounded]"
    assert verdict(Interval(**iv.as_dict())) == "within noise"


def test_change_rows_pair_by_problem_and_mark_unpaired_sources():
    from pasodoble.evals.intervals import change_rows

    first = {"a/1": 0.0, "a/2": 0.0, "b/1": 1.0}
    later = {"a/1": 1.0, "a/2": 1.0, "b/9": 1.0}
    rows = change_rows([first, later], ["base", "tuned"])
    assert rows[0] == "| Change vs base | a | b |"
    assert rows[2] == "| tuned | +100.0 [+100.0, +100.0] above the start | not paired (other problems) |"
