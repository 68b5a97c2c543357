"""Paired tests: hand-worked values, and the same numbers scipy gives when called directly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from r2med.reporting.stats import holm, mean_difference, paired_test


def test_holm_by_hand():
    # sorted: 0.001*4 = 0.004; 0.03*3 = 0.09; 0.04*2 = 0.08 -> running max 0.09; 0.2*1 = 0.2
    assert holm([0.04, 0.001, 0.03, 0.2]) == pytest.approx([0.09, 0.004, 0.09, 0.2])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([0.01]) == [0.01]


def test_small_sample_exact_permutation_and_t_test_by_hand():
    # differences 1, 2, 3 (mean 2): of the 2**3 = 8 sign patterns only +++ and --- reach |mean| >= 2 -> p = 2/8.
    # t = mean / (sd / sqrt(n)) = 2 / (1 / sqrt 3) = 2 sqrt 3; with 2 df, p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(12/14).
    t = paired_test([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert t.permutation_p == pytest.approx(0.25)
    assert t.t_statistic == pytest.approx(2 * math.sqrt(3))
    assert t.t_p == pytest.approx(1 - math.sqrt(12 / 14))
    assert (t.mean_diff, t.wins, t.ties, t.losses) == (2.0, 3, 0, 0)


def test_known_effect_matches_scipy_called_directly():
    rng = np.random.default_rng(7)
    b = rng.uniform(0, 1, 120)
    a = np.clip(b + 0.05 + rng.normal(0, 0.1, 120), 0, 1)
    result = paired_test(a, b, n_resamples=5000, seed=3)
    perm = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                                  vectorized=True, n_resamples=5000, rng=np.random.default_rng(3))
    boot = stats.bootstrap((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), paired=True, vectorized=True,
                           n_resamples=5000, method="BCa", rng=np.random.default_rng(3))
    ttest = stats.ttest_rel(a, b)
    assert result.permutation_p == perm.pvalue and result.t_p == ttest.pvalue and result.t_statistic == ttest.statistic
    assert (result.ci_low, result.ci_high) == (boot.confidence_interval.low, boot.confidence_interval.high)
    assert result.mean_diff == pytest.approx(np.mean(a - b))
    assert result.ci_low < result.mean_diff < result.ci_high and result.permutation_p < 0.01 and result.t_p < 0.001
    assert result.wins + result.ties + result.losses == 120
    assert paired_test(a, b, n_resamples=5000, seed=3) == result  # seeded: the same numbers every time


def test_identical_systems_give_p_1_and_no_difference():
    values = np.linspace(0, 1, 50)
    t = paired_test(values, values.copy())
    assert (t.mean_diff, t.permutation_p, t.t_p, t.ci_low, t.ci_high) == (0.0, 1.0, 1.0, 0.0, 0.0)
    assert (t.wins, t.ties, t.losses) == (0, 50, 0)


def test_constant_difference_has_a_point_interval():
    # every difference is exactly 0.25 (binary fractions): every resample's mean is 0.25; the exact
    # permutation test has 2 of 8 sign patterns at |mean| >= 0.25
    t = paired_test([0.5, 0.75, 1.0], [0.25, 0.5, 0.75])
    assert t.ci_low == t.ci_high == 0.25 and t.permutation_p == pytest.approx(0.25) and t.t_p == 0.0


def test_bad_input():
    with pytest.raises(ValueError, match="same length"):
        paired_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least 2"):
        paired_test([1.0], [0.0])
    assert mean_difference(np.array([[1.0, 3.0], [2.0, 2.0]]), np.zeros((2, 2))).tolist() == [2.0, 2.0]


def test_r2med_sized_tests_are_scipys_numbers_whatever_the_batch():
    """876 queries, 10,000 resamples (R2MED's pooled test): scipy gets them in batches of RESAMPLE_BATCH, and the
    p-value and the interval are the ones scipy gives in one batch (same draws, same order)."""
    rng = np.random.default_rng(38)
    b = rng.uniform(0, 1, 876)
    a = np.clip(b + rng.normal(0.01, 0.2, 876), 0, 1)
    result = paired_test(a, b, seed=5)
    perm = stats.permutation_test((a, b), mean_difference, permutation_type="samples", vectorized=True,
                                  n_resamples=10000, rng=np.random.default_rng(5))
    boot = stats.bootstrap((a, b), mean_difference, paired=True, vectorized=True, n_resamples=10000,
                           method="BCa", rng=np.random.default_rng(5))
    assert result.permutation_p == perm.pvalue
    assert (result.ci_low, result.ci_high) == (boot.confidence_interval.low, boot.confidence_interval.high)
