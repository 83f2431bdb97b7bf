"""The rollout's decision: canary against stable on the same window, check by check, each verdict bounded by how
much evidence it rests on."""

from __future__ import annotations

import pytest

from generator.operate.rollout.decision import (
    Decision,
    Evidence,
    ThresholdError,
    Thresholds,
    decide,
    distribution_distance,
)
from generator.operate.rollout.window import SideWindow

LE = ("0", "1", "2", "5", "10", "+Inf")


def cumulative(counts: list[float]) -> dict[str, float]:
    total, out = 0.0, {}
    for le, count in zip(LE, counts, strict=True):
        total += count
        out[le] = total
    return out


def side(requests: float = 200, failures: float = 0, empty: float = 0, capped: float = 0,
         detections: list[float] | None = None, scores: dict[str, float] | None = None) -> SideWindow:
    return SideWindow(requests=requests, failures=failures, images=requests, empty=empty, capped=capped, rejected=0,
                      mean_ms=25.0, detections_buckets=cumulative(detections or [0, 0, 50, 100, 50, 0]),
                      score_buckets=scores if scores is not None else {"0.5": 10.0, "1": 400.0, "+Inf": 400.0})


def pairs(stable_ms: float = 100.0, canary_ms: float = 100.0, n: int = 30) -> tuple[tuple[float, float], ...]:
    """``n`` paired probes, each side's time spread +-10 % around its value (the machine's noise)."""
    spread = [0.9 + 0.2 * ((7 * i) % n) / n for i in range(n)]
    return tuple((stable_ms * a, canary_ms * b) for a, b in zip(spread, reversed(spread), strict=True))


def decided(stable: SideWindow, canary: SideWindow, agreement: float | None = 1.0,
            latency: tuple[tuple[float, float], ...] | None = None, **limits: float) -> Decision:
    evidence = Evidence(pairs() if latency is None else latency, agreement)
    return decide(stable, canary, evidence, Thresholds(**limits))  # type: ignore[arg-type]


def failed(stable: SideWindow, canary: SideWindow, agreement: float | None = 1.0,
           latency: tuple[tuple[float, float], ...] | None = None, **limits: float) -> list[str]:
    decision = decided(stable, canary, agreement, latency, **limits)
    assert decision.action == ("promote" if not decision.failed else "rollback")
    return [c.name for c in decision.failed]


def test_an_equal_canary_is_promoted() -> None:
    assert failed(side(), side(requests=40)) == []


@pytest.mark.parametrize(("canary", "agreement", "latency", "check"), [
    (side(failures=20), 1.0, None, "error_rate"),
    (side(), 1.0, pairs(100, 400), "latency_median_ms"),
    (side(empty=60), 1.0, None, "empty_share"),
    (side(capped=40), 1.0, None, "capped_share"),
    (side(detections=[200, 0, 0, 0, 0, 0]), 1.0, None, "detections_distribution"),
    (side(scores={"0.5": 380.0, "1": 400.0, "+Inf": 400.0}), 1.0, None, "score_distribution"),
    (side(), 0.5, None, "control_agreement"),
    (side(), None, None, "control_agreement"),  # no control images compared: no evidence
])
def test_each_kind_of_degradation_fails_its_own_check(canary: SideWindow, agreement: float | None,
                                                       latency: tuple[tuple[float, float], ...] | None,
                                                       check: str) -> None:
    assert failed(side(), canary, agreement, latency) == [check]


def test_latency_fails_only_past_both_the_ratio_and_the_absolute_slack() -> None:
    assert failed(side(), side(), latency=pairs(10, 40)) == []  # 4x, but 30 ms
    assert failed(side(), side(), latency=pairs(200, 290)) == []  # +90 ms, but 1.45x
    assert failed(side(), side(), latency=pairs(200, 360)) == ["latency_median_ms"]
    assert failed(side(), side(), latency=pairs(200, 360), max_latency_ratio=2.0) == []


def test_a_few_slow_pairs_are_noise_not_a_slower_candidate() -> None:
    """Three cold or contended calls in ten: the median's lower bound stays below the limit."""
    latency = tuple((25.0, 400.0) if i < 3 else (25.0, 26.0) for i in range(10))
    assert failed(side(), side(), latency=latency) == []


def test_the_tail_is_judged_only_from_enough_pairs_for_a_bound() -> None:
    few = decided(side(), side(), latency=pairs(100, 100, n=58))
    tail = next(c for c in few.checks if c.name == "latency_p95_ms")
    assert tail.passed is None and not tail.required and few.action == "promote"
    enough = decided(side(), side(), latency=pairs(100, 100, n=59))
    assert next(c for c in enough.checks if c.name == "latency_p95_ms").passed is True


def test_too_little_traffic_is_undecided_not_a_rollback() -> None:
    """Ten users' requests on the canary, the worst of them empty: no traffic check is judged, and the decision
    says so instead of reading like a worse model."""
    decision = decided(side(), side(requests=10, empty=5))
    assert decision.action == "undecided" and decision.failed == ()
    assert {c.name for c in decision.unjudged} >= {"canary_requests", "empty_share", "error_rate"}
    assert decided(side(), side(), latency=pairs(n=4)).action == "undecided"  # too few pairs for latency


def test_the_control_images_are_judged_whatever_the_traffic() -> None:
    assert decided(side(), side(requests=3), agreement=0.2).action == "rollback"


def test_a_small_sample_needs_a_larger_difference_to_fail() -> None:
    """The same 15-point rise of the empty share: noise at 20 images a side, a verdict at 2,000."""
    assert failed(side(requests=20, empty=2), side(requests=20, empty=5)) == []
    assert failed(side(requests=2000, empty=200), side(requests=2000, empty=500)) == ["empty_share"]


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
    with pytest.raises(ThresholdError, match="--max-latency-ratio must be >= 1"):
        Thresholds(max_latency_ratio=0.5)
    with pytest.raises(ThresholdError, match="--confidence must be within"):
        Thresholds(confidence=1.0)
