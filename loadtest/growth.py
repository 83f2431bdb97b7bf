"""Growth per hour of a sampled resource, and the verdict a soak takes from it.

Memory rises while a server warms up (allocator arenas, shared-memory regions growing to the largest batch,
lazily loaded libraries), so the first part of a run is left out of the fit. The slope is Theil-Sen's (the
median of the slopes between every pair of samples after the warm-up): a few spikes, e.g. a garbage
collection or a burst of large images, do not tilt it the way they tilt a least-squares line.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .errors import LoadTestError

MAX_PAIRS_SAMPLES = 2000  # beyond this, every k-th sample: Theil-Sen is quadratic in the sample count


def theil_sen_slope(t: Sequence[float], y: Sequence[float]) -> float:
    """Median of the pairwise slopes (y per unit of t); needs two samples at different times."""
    import numpy as np

    times, values = np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64)
    step = max(1, len(times) // MAX_PAIRS_SAMPLES)
    times, values = times[::step], values[::step]
    i, j = np.triu_indices(len(times), k=1)
    dt = times[j] - times[i]
    keep = dt > 0
    if not keep.any():
        raise LoadTestError("a growth rate needs samples at two different times at least")
    return float(np.median((values[j] - values[i])[keep] / dt[keep]))


@dataclass(frozen=True)
class Growth:
    """One series over a run: its growth per hour after the warm-up, and where it started, ended and peaked."""

    unit: str
    per_hour: float
    at_warmup: float  # the fitted line's value at the end of the warm-up
    first: float  # first sample after the warm-up
    last: float
    peak: float
    fitted_samples: int

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def growth(t_s: Sequence[float], values: Sequence[float], warmup_s: float, unit: str) -> Growth:
    """Theil-Sen growth per hour of ``values`` sampled at ``t_s`` (seconds), ignoring ``t_s < warmup_s``."""
    fitted = [(t, v) for t, v in zip(t_s, values, strict=True) if t >= warmup_s]
    if len(fitted) < 2:
        raise LoadTestError(f"only {len(fitted)} sample(s) after a warm-up of {warmup_s:g} s: run longer, "
                            "sample more often (--sample-interval) or shorten --warmup")
    times, kept = [t for t, _ in fitted], [v for _, v in fitted]
    slope = theil_sen_slope(times, kept)
    at_warmup = statistics.median(v - slope * (t - warmup_s) for t, v in fitted)
    return Growth(unit=unit, per_hour=slope * 3600.0, at_warmup=at_warmup, first=kept[0], last=kept[-1],
                  peak=max(kept), fitted_samples=len(kept))


def breaches(growths: Mapping[str, Growth], limits: Mapping[str, float]) -> list[str]:
    """One line per series whose growth per hour exceeds its limit (series without a limit are reported only)."""
    reasons = []
    for series, limit in limits.items():
        if series not in growths:
            raise LoadTestError(f"no samples of {series!r} to hold to its limit")
        g = growths[series]
        if g.per_hour > limit:
            reasons.append(f"{series} grew {g.per_hour:.1f} {g.unit}/hour after the warm-up "
                           f"(limit {limit:g} {g.unit}/hour; {g.first:.1f} -> {g.last:.1f} {g.unit})")
    return reasons
