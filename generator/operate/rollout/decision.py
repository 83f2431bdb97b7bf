"""Promote, roll back, or say there is not enough evidence: the judged side against the reference side over the
same window, check by check, against the user's limits.

Pure: numbers in, a decision out. Every check is recorded (both values, the limit, its verdict) so that the
decision record says why. A check fails only when the evidence shows, at ``confidence``, that the candidate is
worse than the limit allows (stats.py): a small sample widens the bounds instead of flipping the verdict. Below
``min_requests`` users' requests on a side no traffic check is judged at all, below ``min_latency_pairs`` paired
probes no latency check: a window that ends so ends ``undecided``, never in a rollback that reads like a worse
model. The control images' agreement (and their labels) are a fixed paired set and are judged whatever the traffic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from generator.errors import GeneratorError
from generator.operate.rollout import stats
from generator.operate.rollout.window import SideWindow

PROMOTE, ROLLBACK, UNDECIDED = "promote", "rollback", "undecided"
# The tail is judged from paired probes once both sides' p95 have a distribution-free bound: 59 at 95 %.
TAIL_QUANTILE = 0.95


class ThresholdError(GeneratorError):
    """A rollout limit that makes no sense."""


@dataclass(frozen=True)
class Thresholds:
    """How much worse than stable the canary may be, and how much evidence a verdict needs; every one a flag of
    ``generator rollout``."""

    min_requests: int = 20  # users' requests per side before a traffic check is judged
    min_latency_pairs: int = 10  # paired probes before the latency check is judged
    confidence: float = 0.95  # one-sided, of every bound a check compares with its limit
    max_error_rate_increase: float = 0.01  # absolute: 0.01 = one point of failed requests more
    max_latency_ratio: float = 1.5  # and ...
    max_latency_increase_ms: float = 50.0  # ... both must be exceeded: a ratio alone flaps on small latencies
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
        if self.max_latency_ratio < 1.0 or self.max_latency_increase_ms < 0:
            raise ThresholdError("--max-latency-ratio must be >= 1 and --max-latency-increase-ms >= 0")
        if self.min_requests < 1 or self.min_latency_pairs < 5:
            raise ThresholdError("--min-requests must be >= 1 and --min-latency-pairs >= 5 (the fewest pairs whose "
                                 "median has a 95 % bound)")
        if not 0.5 <= self.confidence < 1.0:
            raise ThresholdError(f"--confidence must be within 0.5..1 (e.g. 0.95), got {self.confidence}")


@dataclass(frozen=True)
class Check:
    name: str
    stable: float | None
    canary: float | None
    limit: str
    passed: bool | None  # None: not enough evidence to judge
    bound: float | None = None  # what was compared with the limit (a confidence bound), when not a value itself
    required: bool = True  # a required check without evidence leaves the decision undecided


@dataclass(frozen=True)
class Decision:
    action: str  # PROMOTE, ROLLBACK or UNDECIDED
    checks: tuple[Check, ...]

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.passed is False)

    @property
    def unjudged(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.passed is None and c.required)

    def to_json(self) -> dict[str, object]:
        return {"action": self.action, "failed": [c.name for c in self.failed],
                "insufficient": [c.name for c in self.unjudged], "checks": [asdict(c) for c in self.checks]}


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


@dataclass(frozen=True)
class Evidence:
    """What a window offers besides Triton's counters: the paired probes' milliseconds (reference, judged), the
    control images' agreement, and both sides' mAP@0.5 on the labelled control images."""

    pairs: Sequence[tuple[float, float]] = ()
    agreement: float | None = None
    labelled: tuple[float, float] | None = None


def decide(stable: SideWindow, canary: SideWindow, evidence: Evidence, limits: Thresholds) -> Decision:
    """Any check failed: roll back. Else any required check without evidence: undecided. Else promote."""
    enough = min(stable.requests, canary.requests) >= limits.min_requests
    checks = [_requests_check("stable_requests", stable.requests, limits),
              _requests_check("canary_requests", canary.requests, limits),
              *(_traffic_checks(stable, canary, limits, enough)),
              *_latency_checks(evidence.pairs, limits),
              Check("control_agreement", 1.0, evidence.agreement, f">= {limits.min_agreement:g}",
                    evidence.agreement is not None and evidence.agreement >= limits.min_agreement)]
    if evidence.labelled is not None:
        first, second = evidence.labelled
        checks.append(Check("control_labels_map50", first, second, f"stable - canary <= {limits.max_label_map_drop:g}",
                            first - second <= limits.max_label_map_drop))
    decision = Decision(PROMOTE, tuple(checks))
    if decision.failed:
        return Decision(ROLLBACK, decision.checks)
    return Decision(UNDECIDED, decision.checks) if decision.unjudged else decision


def _requests_check(name: str, requests: float, limits: Thresholds) -> Check:
    enough = requests >= limits.min_requests
    return Check(name, None, requests, f">= {limits.min_requests} users' requests", True if enough else None)


def _share_check(name: str, stable: tuple[float, float], canary: tuple[float, float], increase: float,
                 limits: Thresholds, enough: bool) -> Check:
    """Shares as (count, total): fails when the lower bound of the canary's increase exceeds ``increase``."""
    share = lambda pair: pair[0] / pair[1] if pair[1] else 0.0  # noqa: E731
    bound = stats.increase_lower_bound(canary, stable, limits.confidence)
    return Check(name, share(stable), share(canary), f"canary - stable <= {increase:g} (lower bound)",
                 (bound <= increase) if enough else None, round(bound, 4))


def _traffic_checks(stable: SideWindow, canary: SideWindow, limits: Thresholds, enough: bool) -> list[Check]:
    checks = [_share_check("error_rate", (stable.failures, stable.requests), (canary.failures, canary.requests),
                           limits.max_error_rate_increase, limits, enough),
              _share_check("empty_share", (stable.empty, stable.images), (canary.empty, canary.images),
                           limits.max_empty_share_increase, limits, enough),
              _share_check("capped_share", (stable.capped, stable.images), (canary.capped, canary.images),
                           limits.max_capped_share_increase, limits, enough)]
    for name, first, second, limit in (
            ("detections_distribution", stable.detections_buckets, canary.detections_buckets,
             limits.max_detections_distance),
            ("score_distribution", stable.score_buckets, canary.score_buckets, limits.max_score_distance)):
        distance = distribution_distance(first, second)
        # No scores at all on one side while the other has some is the largest difference there is.
        if distance is None and bool(first.get("+Inf")) != bool(second.get("+Inf")):
            distance = 1.0
        # The sample is the images, for scores too: one image's detections rise and fall together (a scene the
        # model finds easy gives many high scores), so counting each detection as a draw would make the margin too
        # narrow. Measured: 488 against 190 scores from 88 and 34 images of one model were 0.32 apart.
        margin = stats.ks_margin(stable.images, canary.images, limits.confidence)
        passed = None if not enough else distance is None or distance <= limit + margin
        checks.append(Check(name, 0.0, distance, f"KS distance <= {limit:g} + {margin:.3f} (sampling margin)",
                            passed, round(limit + margin, 4)))
    return checks


def _latency_checks(pairs: Sequence[tuple[float, float]], limits: Thresholds) -> list[Check]:
    """The typical request (the median of the paired differences, each pair one image through both sides at
    once) and, once there are pairs enough to bound a p95 at all, the tail."""
    reference = [p[0] for p in pairs]
    judged = [p[1] for p in pairs]
    ratios = [j / r for r, j in pairs if r > 0]
    gaps = [j - r for r, j in pairs]
    limit = f"canary <= {limits.max_latency_ratio:g} x stable or canary - stable <= {limits.max_latency_increase_ms:g} ms"
    median = lambda values: sorted(values)[len(values) // 2] if values else None  # noqa: E731
    ratio_low = stats.quantile_lower_bound(ratios, 0.5, limits.confidence)
    gap_low = stats.quantile_lower_bound(gaps, 0.5, limits.confidence)
    typical: bool | None = None
    if len(pairs) >= limits.min_latency_pairs and ratio_low is not None and gap_low is not None:
        typical = not (ratio_low > limits.max_latency_ratio and gap_low > limits.max_latency_increase_ms)
    checks = [Check("latency_median_ms", median(reference), median(judged), f"{limit} (paired, lower bounds)",
                    typical, None if ratio_low is None else round(ratio_low, 3))]
    slow_low = stats.quantile_lower_bound(judged, TAIL_QUANTILE, limits.confidence)
    fast_high = stats.quantile_upper_bound(reference, TAIL_QUANTILE, limits.confidence)
    tail: bool | None = None
    if slow_low is not None and fast_high is not None:
        tail = not (slow_low > fast_high * limits.max_latency_ratio
                    and slow_low - fast_high > limits.max_latency_increase_ms)
    p95 = lambda values: sorted(values)[min(len(values) - 1, int(0.95 * len(values)))] if values else None  # noqa: E731
    checks.append(Check("latency_p95_ms", p95(reference), p95(judged),
                        f"{limit} (canary's lower bound against stable's upper bound; judged from 59 pairs)",
                        tail, slow_low, required=False))
    return checks
