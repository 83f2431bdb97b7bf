"""Growth per hour after a warm-up, and the limits a soak holds it to."""

from __future__ import annotations

import pytest

from loadtest.errors import LoadTestError
from loadtest.growth import breaches, growth, theil_sen_slope


def test_theil_sen_recovers_the_slope_through_spikes_that_tilt_least_squares():
    import numpy as np

    t = np.arange(0.0, 600.0, 5.0)
    y = 500.0 + 0.01 * t  # 36 MB/hour
    y[-5:] += 300.0  # a burst at the end (a batch of huge images) is not a leak
    ordinary = float(np.polyfit(t, y, 1)[0])
    assert ordinary > 0.05
    assert theil_sen_slope(t.tolist(), y.tolist()) == pytest.approx(0.01, rel=1e-6)


def test_growth_leaves_the_warm_up_out_and_reports_per_hour():
    t = [float(s) for s in range(0, 1200, 10)]
    # Start-up growth for 15 minutes (180 MB/hour), then flat: no leak.
    values = [100.0 + min(s, 900.0) * 0.05 for s in t]
    assert growth(t, values, warmup_s=0.0, unit="MB").per_hour == pytest.approx(180.0)
    flat = growth(t, values, warmup_s=900.0, unit="MB")
    assert flat.per_hour == pytest.approx(0.0)
    assert (flat.first, flat.last, flat.peak, flat.at_warmup) == (145.0, 145.0, 145.0, 145.0)
    assert flat.fitted_samples == len([s for s in t if s >= 900])


def test_a_leak_after_the_warm_up_is_measured_per_hour():
    t = [float(s) for s in range(0, 1800, 5)]
    values = [200.0 + s * (150.0 / 3600.0) for s in t]  # 150 MB/hour
    leak = growth(t, values, warmup_s=300.0, unit="MB")
    assert leak.per_hour == pytest.approx(150.0)
    (reason,) = breaches({"rss_total_mb": leak}, {"rss_total_mb": 100.0})
    assert "rss_total_mb grew 150.0 MB/hour" in reason and "limit 100 MB/hour" in reason
    assert breaches({"rss_total_mb": leak}, {"rss_total_mb": 200.0}) == []


def test_too_few_samples_after_the_warm_up_say_what_to_change():
    with pytest.raises(LoadTestError, match="--sample-interval"):
        growth([0.0, 10.0, 20.0], [1.0, 2.0, 3.0], warmup_s=15.0, unit="MB")
    with pytest.raises(LoadTestError, match="two different times"):
        theil_sen_slope([5.0, 5.0], [1.0, 2.0])


def test_a_limit_without_samples_is_an_error_not_a_pass():
    with pytest.raises(LoadTestError, match="no samples of 'shm_mb'"):
        breaches({}, {"shm_mb": 50.0})
