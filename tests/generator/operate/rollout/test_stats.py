"""The confidence bounds behind the rollout's checks, against values worked out by hand or known from tables."""

from __future__ import annotations

import math

import pytest

from generator.operate.rollout import stats


def test_binomial_cdf() -> None:
    assert stats.binomial_cdf(1, 10, 0.5) == pytest.approx(11 / 1024)
    assert stats.binomial_cdf(-1, 10, 0.5) == 0.0 and stats.binomial_cdf(10, 10, 0.5) == pytest.approx(1.0)


def test_the_median_bound_is_the_sign_tests_order_statistic() -> None:
    values = list(range(1, 11))  # n = 10: P(Binomial(10, 0.5) >= 2) = 0.989, >= 3: 0.945
    assert stats.quantile_lower_bound(values, 0.5, 0.95) == 2
    assert stats.quantile_lower_bound([1.0, 2.0, 3.0, 4.0], 0.5, 0.95) is None  # 4 values: 1 - 0.5^4 < 0.95


def test_a_p95_upper_bound_needs_59_values_at_95_percent() -> None:
    assert stats.quantile_upper_bound(list(range(58)), 0.95, 0.95) is None
    assert stats.quantile_upper_bound(list(range(59)), 0.95, 0.95) == 58  # 0.95^59 = 0.0485


def test_wilson_interval_matches_the_textbook_value() -> None:
    low, high = stats.wilson(0, 20, 0.975)  # two-sided 95 %: 0 of 20 -> 0 .. 0.161
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-3)


def test_the_increase_bound_is_below_the_observed_difference_and_tightens_with_the_sample() -> None:
    small = stats.increase_lower_bound((5, 20), (2, 20), 0.95)
    large = stats.increase_lower_bound((500, 2000), (200, 2000), 0.95)
    assert small < 0.15 and large < 0.15 and small < large
    assert large == pytest.approx(0.15, abs=0.03)


def test_ks_margin_is_the_large_sample_critical_value() -> None:
    # Two-sided 5 % (the bound is used one-sided at 95 %): c = sqrt(-ln(0.025) / 2) = 1.358.
    assert stats.ks_margin(100, 100, 0.95) == pytest.approx(1.358 * math.sqrt(2 / 100), abs=1e-3)
    assert stats.ks_margin(0, 100, 0.95) == 1.0
