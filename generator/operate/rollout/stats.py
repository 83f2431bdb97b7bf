"""The confidence bounds the rollout's checks use, so that a verdict accounts for how much evidence it rests on.

Distribution-free where they can be: a quantile's bound is an order statistic chosen with the binomial
distribution (the sign test's reasoning), a share's is Wilson's score interval, the difference of two shares
Newcombe's hybrid score interval, and a Kolmogorov-Smirnov distance is compared with its large-sample critical
value. Each bound is one-sided at ``confidence``: a check fails only when the evidence says, at that confidence,
that the canary is worse than the user's limit allows. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    return min(1.0, sum(math.comb(n, i) * p**i * (1.0 - p) ** (n - i) for i in range(min(k, n) + 1)))


def quantile_lower_bound(values: Sequence[float], q: float, confidence: float) -> float | None:
    """A lower ``confidence`` bound of the ``q`` quantile: the k-th smallest value, k the largest with
    P(at least k of n values lie below the quantile) >= confidence. None when n is too small for any."""
    ordered, n = sorted(values), len(values)
    best = None
    for k in range(1, n + 1):  # P(X_(k) <= quantile) = P(Binomial(n, q) >= k)
        if 1.0 - binomial_cdf(k - 1, n, q) >= confidence:
            best = ordered[k - 1]
        else:
            break
    return best


def quantile_upper_bound(values: Sequence[float], q: float, confidence: float) -> float | None:
    """An upper ``confidence`` bound of the ``q`` quantile: the m-th smallest value, m the smallest with
    P(fewer than m values lie below the quantile) >= confidence. None when n is too small (p95 at 95 %: n < 59)."""
    ordered, n = sorted(values), len(values)
    for m in range(1, n + 1):  # P(X_(m) >= quantile) = P(Binomial(n, q) <= m - 1)
        if binomial_cdf(m - 1, n, q) >= confidence:
            return ordered[m - 1]
    return None


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(confidence)


def wilson(count: float, total: float, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of a share ``count / total``, each end one-sided at ``confidence``."""
    if total <= 0:
        return 0.0, 1.0
    z, share = _z(confidence), count / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z / (1 + z * z / total) * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def increase_lower_bound(canary: tuple[float, float], stable: tuple[float, float], confidence: float) -> float:
    """A lower ``confidence`` bound of (canary share - stable share), each share given as (count, total):
    Newcombe's hybrid score interval (his method 10), sound at small counts and at shares of 0 or 1."""
    p_canary = canary[0] / canary[1] if canary[1] else 0.0
    p_stable = stable[0] / stable[1] if stable[1] else 0.0
    low_canary, _ = wilson(*canary, confidence)
    _, high_stable = wilson(*stable, confidence)
    return (p_canary - p_stable) - math.sqrt((p_canary - low_canary) ** 2 + (high_stable - p_stable) ** 2)


def ks_margin(first: float, second: float, confidence: float) -> float:
    """How far two samples of ``first`` and ``second`` values drawn from one distribution may lie apart in
    Kolmogorov-Smirnov distance at ``confidence`` (the large-sample critical value, c(a) x sqrt((n+m)/(n m)))."""
    if first <= 0 or second <= 0:
        return 1.0
    return math.sqrt(-math.log((1.0 - confidence) / 2.0) / 2.0) * math.sqrt((first + second) / (first * second))
