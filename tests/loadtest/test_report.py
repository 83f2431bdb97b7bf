from __future__ import annotations

import numpy as np
import pytest

from loadtest.report import (
    LatencyPoint,
    compare_p50,
    comparison_table,
    percentile,
    point_from_latencies,
    points_table,
    threshold_breaches,
)


@pytest.mark.parametrize("q", [0, 1, 50, 90, 95, 99, 100])
def test_percentile_agrees_with_numpy(q):
    values = sorted(np.random.default_rng(3).gamma(2.0, 30.0, size=257).tolist())
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_none():
    assert percentile([], 50) is None
    assert percentile([4.0], 95) == 4.0


def test_point_counts_failures_but_not_their_latency():
    point = point_from_latencies("bench", 2, [10.0, 20.0, 30.0], failures=1, elapsed_s=2.0)
    assert (point.requests, point.failures, point.throughput_rps, point.p50_ms) == (4, 1, 1.5, 20.0)
    assert point.fail_ratio == 0.25
    assert point.to_dict()["fail_ratio"] == 0.25


def test_thresholds():
    assert threshold_breaches(120.0, 0.0, 10, sla_p95_ms=150, max_fail_ratio=0.01) == []
    (reason,) = threshold_breaches(120.0, 0.0, 10, sla_p95_ms=0.001, max_fail_ratio=None)
    assert "p95" in reason and "0.001" in reason
    (reason,) = threshold_breaches(120.0, 0.2, 10, sla_p95_ms=None, max_fail_ratio=0.1)
    assert "failure ratio" in reason
    assert threshold_breaches(None, 1.0, 5, sla_p95_ms=100, max_fail_ratio=None)[0].startswith("p95 latency unknown")
    assert threshold_breaches(None, 0.0, 0, None, None) == ["no request was made"]


def _point(tool: str, concurrency: int, p50: float | None) -> LatencyPoint:
    return LatencyPoint(tool, concurrency, 10, 0, 1.0, p50, None, None, None, None)


def test_compare_p50_lines_up_common_concurrencies():
    rows = compare_p50([_point("bench", 1, 100), _point("bench", 2, 150)],
                       [_point("locust", 2, 180), _point("locust", 4, 300)],
                       [_point("perf_analyzer", 2, 160)])
    (row,) = rows
    assert row.concurrency == 2
    assert row.p50_ms == {"bench": 150, "locust": 180, "perf_analyzer": 160}
    assert row.spread_ratio == pytest.approx(1.2)
    table = comparison_table(rows)
    assert table[0].startswith("| concurrency | bench p50 ms | locust p50 ms | perf_analyzer p50 ms")
    assert "| 2 | 150.0 | 180.0 | 160.0 | 1.20 |" in table


def test_points_table_shows_missing_values_as_dash():
    lines = points_table([_point("bench", 1, None)])
    assert lines[-1].count("| - ") >= 4
