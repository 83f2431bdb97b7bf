"""Promote or roll back: canary against stable on the same window, check by check, against the user's limits.

Pure: numbers in, a decision out. Every check is recorded (both values, the limit, passed or not) so that the
decision record says why. A canary that got too little traffic to judge is rolled back: no evidence is not
evidence of health.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from generator.errors import GeneratorError
from generator.operate.rollout.window import SideWindow


class ThresholdError(GeneratorError):
    """A rollout limit that makes no sense."""


@dataclass(frozen=True)
class Thresholds:
    """How much worse than stable the canary may be; every limit a flag of ``generator rollout``."""

    min_canary_requests: int = 20
    max_error_rate_increase: float = 0.01  # absolute: 0.01 = one point of failed requests more
    max_p95_ratio: float = 1.5  # and ...
    max_p95_increase_ms: float = 50.0  # ... both must be exceeded: a ratio alone flaps on small latencies
    max_empty_share_increase: float = 0.10
    max_capped_share_increase: float = 0.05
    max_detections_distance: float = 0.20  # largest gap between the two cumulative distributions (0..1)
    max_score_distance: float = 0.20
    min_agreement: float = 0.90  # mirrored control images: matched detections (F1 at IoU 0.5, same class)
    max_label_map_drop: float = 0.05  # labelled control images: mAP@0.5 the canary may lose against stable

    def __post_init__(self) -> None:
        unit = ("max_error_rate_increase", "max_empty_share_increase", "max_capped_share_increase",
                "max_detections_distance", "max_score_distance", "min_agreement", "max_label_map_drop")
        for name in unit:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ThresholdError(f"--{name.replace('_', '-')} must be within 0..1, got {getattr(self, name)}")
        if self.max_p95_ratio < 1.0 or self.max_p95_increase_ms < 0 or self.min_canary_requests < 1:
            raise ThresholdError("--max-p95-ratio must be >= 1, --max-p95-increase-ms >= 0 and "
                                 "--min-canary-requests >= 1")


@dataclass(frozen=True)
class Check:
    name: str
    stable: float | None
    canary: float | None
    limit: str
    passed: bool


@dataclass(frozen=True)
class Decision:
    action: str  # "promote" or "rollback"
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def to_json(self) -> dict[str, object]:
        return {"action": self.action, "failed": [c.name for c in self.failed],
                "checks": [asdict(c) for c in self.checks]}


def _cdf(buckets: Mapping[str, float]) -> dict[float, float]:
    """Cumulative buckets (le -> count) as fractions of the total (the +Inf bucket)."""
    total = buckets.get("+Inf", 0.0)
    return {float(le): (count / total if total else 0.0) for le, count in buckets.items()}


def distribution_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float | None:
    """Kolmogorov-Smirnov distance of two bucketed histograms (None when either is empty)."""
    if not a.get("+Inf") or not b.get("+Inf"):
        return None
    first, second = _cdf(a), _cdf(b)
    return max(abs(first[le] - second.get(le, 0.0)) for le in first)


def _within(name: str, stable: float | None, canary: float | None, increase: float) -> Check:
    passed = stable is None or canary is None or canary - stable <= increase
    return Check(name, stable, canary, f"canary - stable <= {increase:g}", passed)


def decide(stable: SideWindow, canary: SideWindow, agreement: float | None, limits: Thresholds,
           labelled: tuple[float, float] | None = None) -> Decision:
    """All checks pass: promote. Any fails: roll back. ``labelled``: both sides' mAP@0.5 on the user's labelled
    control images (stable, canary), checked when given."""
    checks = [Check("canary_requests", stable.requests, canary.requests, f">= {limits.min_canary_requests}",
                    canary.requests >= limits.min_canary_requests),
              _within("error_rate", stable.error_rate, canary.error_rate, limits.max_error_rate_increase),
              _p95_check(stable.p95_ms, canary.p95_ms, limits),
              _within("empty_share", stable.share(stable.empty), canary.share(canary.empty),
                      limits.max_empty_share_increase),
              _within("capped_share", stable.share(stable.capped), canary.share(canary.capped),
                      limits.max_capped_share_increase)]
    for name, first, second, limit in (
            ("detections_distribution", stable.detections_buckets, canary.detections_buckets,
             limits.max_detections_distance),
            ("score_distribution", stable.score_buckets, canary.score_buckets, limits.max_score_distance)):
        distance = distribution_distance(first, second)
        # No scores at all on one side while the other has some is the largest difference there is.
        if distance is None and bool(first.get("+Inf")) != bool(second.get("+Inf")):
            distance = 1.0
        checks.append(Check(name, 0.0, distance, f"KS distance <= {limit:g}", distance is None or distance <= limit))
    checks.append(Check("control_agreement", 1.0, agreement, f">= {limits.min_agreement:g}",
                        agreement is not None and agreement >= limits.min_agreement))
    if labelled is not None:
        checks.append(Check("control_labels_map50", labelled[0], labelled[1],
                            f"stable - canary <= {limits.max_label_map_drop:g}",
                            labelled[0] - labelled[1] <= limits.max_label_map_drop))
    action = "promote" if all(c.passed for c in checks) else "rollback"
    return Decision(action, tuple(checks))


def _p95_check(stable: float | None, canary: float | None, limits: Thresholds) -> Check:
    limit = f"canary <= {limits.max_p95_ratio:g} x stable or canary - stable <= {limits.max_p95_increase_ms:g} ms"
    if canary is None or stable is None:
        # No quantile on a side means Triton saw no request there in its window: the request check decides.
        return Check("p95_latency_ms", stable, canary, limit, True)
    slower = canary > stable * limits.max_p95_ratio and canary - stable > limits.max_p95_increase_ms
    return Check("p95_latency_ms", stable, canary, limit, not slower)
