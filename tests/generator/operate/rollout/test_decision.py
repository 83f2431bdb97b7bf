"""The rollout's decision: canary against stable on the same window, check by check."""

from __future__ import annotations

import pytest

from generator.operate.rollout.decision import ThresholdError, Thresholds, decide, distribution_distance
from generator.operate.rollout.window import SideWindow

LE = ("0", "1", "2", "5", "10", "+Inf")


def cumulative(counts: list[float]) -> dict[str, float]:
    total, out = 0.0, {}
    for le, count in zip(LE, counts, strict=True):
        total += count
        out[le] = total
    return out


def side(requests: float = 200, failures: float = 0, empty: float = 0, capped: float = 0, p95: float | None = 100,
         detections: list[float] | None = None, scores: dict[str, float] | None = None) -> SideWindow:
    return SideWindow(requests=requests, failures=failures, images=requests, empty=empty, capped=capped, rejected=0,
                      p95_ms=p95, detections_buckets=cumulative(detections or [0, 0, 50, 100, 50, 0]),
                      score_buckets=scores if scores is not None else {"0.5": 10.0, "1": 400.0, "+Inf": 400.0})


def failed(stable: SideWindow, canary: SideWindow, agreement: float | None = 1.0, **limits: float) -> list[str]:
    decision = decide(stable, canary, agreement, Thresholds(**limits))  # type: ignore[arg-type]
    assert decision.action == ("promote" if not decision.failed else "rollback")
    return [c.name for c in decision.failed]


def test_an_equal_canary_is_promoted() -> None:
    assert failed(side(), side(requests=40)) == []


@pytest.mark.parametrize(("canary", "agreement", "check"), [
    (side(requests=10), 1.0, "canary_requests"),
    (side(failures=5), 1.0, "error_rate"),
    (side(p95=400), 1.0, "p95_latency_ms"),
    (side(empty=50), 1.0, "empty_share"),
    (side(capped=20), 1.0, "capped_share"),
    (side(detections=[200, 0, 0, 0, 0, 0]), 1.0, "detections_distribution"),
    (side(scores={"0.5": 380.0, "1": 400.0, "+Inf": 400.0}), 1.0, "score_distribution"),
    (side(), 0.5, "control_agreement"),
    (side(), None, "control_agreement"),  # no control images compared: no evidence
])
def test_each_kind_of_degradation_fails_its_own_check(canary: SideWindow, agreement: float | None, check: str) -> None:
    assert failed(side(), canary, agreement) == [check]


def test_latency_fails_only_past_both_the_ratio_and_the_absolute_slack() -> None:
    assert failed(side(p95=10), side(p95=40)) == []  # 4x, but 30 ms
    assert failed(side(p95=200), side(p95=290)) == []  # +90 ms, but 1.45x
    assert failed(side(p95=200), side(p95=320)) == ["p95_latency_ms"]
    assert failed(side(p95=200), side(p95=320), max_p95_ratio=2.0) == []


def test_a_canary_that_returns_nothing_has_no_score_distribution_at_all() -> None:
    nothing = side(empty=200, detections=[200, 0, 0, 0, 0, 0], scores={"0.5": 0.0, "1": 0.0, "+Inf": 0.0})
    assert set(failed(side(), nothing)) == {"empty_share", "detections_distribution", "score_distribution"}


def test_distribution_distance_is_the_largest_cdf_gap() -> None:
    assert distribution_distance(cumulative([1, 1, 0, 0, 0, 0]), cumulative([0, 0, 1, 1, 0, 0])) == 1.0
    assert distribution_distance(cumulative([1, 1, 1, 1, 0, 0]), cumulative([1, 1, 1, 1, 0, 0])) == 0.0
    assert distribution_distance({"+Inf": 0.0}, cumulative([1, 0, 0, 0, 0, 0])) is None


def test_limits_outside_their_range_are_refused() -> None:
    with pytest.raises(ThresholdError, match=r"--min-agreement must be within 0\.\.1"):
        Thresholds(min_agreement=1.5)
    with pytest.raises(ThresholdError, match="--max-p95-ratio must be >= 1"):
        Thresholds(max_p95_ratio=0.5)
