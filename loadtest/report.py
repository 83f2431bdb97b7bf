"""The common result shape of every load tool here, the pass/fail checks, and cross-tool comparison.

Locust, perf_analyzer and the bench harness all reduce to ``LatencyPoint`` rows (one per concurrency), so
their numbers can be compared side by side and checked against the same SLA.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LatencyPoint:
    """Client-side latency and throughput of one load level (``concurrency`` closed-loop clients)."""

    tool: str
    concurrency: int
    requests: int
    failures: int
    throughput_rps: float
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    avg_ms: float | None
    label: str = ""

    @property
    def fail_ratio(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fail_ratio": round(self.fail_ratio, 6)}


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0..100) of already sorted values; None when empty."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low))


def point_from_latencies(
    tool: str, concurrency: int, latencies_ms: Sequence[float], failures: int, elapsed_s: float, label: str = ""
) -> LatencyPoint:
    """Summarise successful-request latencies; throughput counts successes only."""
    values = sorted(latencies_ms)

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 2)

    return LatencyPoint(
        tool=tool,
        concurrency=concurrency,
        requests=len(values) + failures,
        failures=failures,
        throughput_rps=round(len(values) / elapsed_s, 3) if elapsed_s > 0 else 0.0,
        p50_ms=r(percentile(values, 50)),
        p90_ms=r(percentile(values, 90)),
        p95_ms=r(percentile(values, 95)),
        p99_ms=r(percentile(values, 99)),
        avg_ms=r(sum(values) / len(values)) if values else None,
        label=label,
    )


def threshold_breaches(
    p95_ms: float | None, fail_ratio: float, requests: int, sla_p95_ms: float | None, max_fail_ratio: float | None
) -> list[str]:
    """Why a run fails its thresholds (empty list: it passes). No successful request always fails."""
    reasons: list[str] = []
    if requests == 0:
        reasons.append("no request was made")
        return reasons
    if sla_p95_ms is not None:
        if p95_ms is None:
            reasons.append(f"p95 latency unknown (no successful request), SLA is {sla_p95_ms:g} ms")
        elif p95_ms > sla_p95_ms:
            reasons.append(f"p95 latency {p95_ms:g} ms exceeds the SLA of {sla_p95_ms:g} ms")
    if max_fail_ratio is not None and fail_ratio > max_fail_ratio:
        reasons.append(f"failure ratio {fail_ratio:.4f} exceeds the maximum of {max_fail_ratio:g}")
    return reasons


@dataclass(frozen=True)
class P50Comparison:
    concurrency: int
    p50_ms: dict[str, float | None]  # tool -> p50 at this concurrency

    @property
    def spread_ratio(self) -> float | None:
        """Largest p50 / smallest p50 across tools (1.0 = identical)."""
        values = [v for v in self.p50_ms.values() if v]
        return round(max(values) / min(values), 3) if len(values) >= 2 else None


def compare_p50(*point_sets: Sequence[LatencyPoint]) -> list[P50Comparison]:
    """Line up p50 latencies of several tools at the concurrencies they all measured."""
    by_tool: list[dict[int, LatencyPoint]] = [{p.concurrency: p for p in points} for points in point_sets]
    if not by_tool:
        return []
    common = set(by_tool[0]).intersection(*by_tool[1:]) if len(by_tool) > 1 else set(by_tool[0])
    rows = []
    for concurrency in sorted(common):
        rows.append(
            P50Comparison(
                concurrency=concurrency,
                p50_ms={points[concurrency].tool: points[concurrency].p50_ms for points in by_tool},
            )
        )
    return rows


def points_table(points: Sequence[LatencyPoint]) -> list[str]:
    """Markdown rows (with header) for a list of points."""
    lines = [
        "| tool | label | concurrency | requests | failures | rps | p50 ms | p95 ms | p99 ms | avg ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for p in points:
        lines.append(
            f"| {p.tool} | {p.label} | {p.concurrency} | {p.requests} | {p.failures} | {p.throughput_rps:.2f} "
            f"| {f(p.p50_ms)} | {f(p.p95_ms)} | {f(p.p99_ms)} | {f(p.avg_ms)} |"
        )
    return lines


def comparison_table(rows: Sequence[P50Comparison]) -> list[str]:
    if not rows:
        return []
    tools = list(rows[0].p50_ms)
    lines = [
        "| concurrency | " + " | ".join(f"{t} p50 ms" for t in tools) + " | max/min |",
        "|---:|" + "---:|" * (len(tools) + 1),
    ]
    for row in rows:
        cells = ["-" if row.p50_ms[t] is None else f"{row.p50_ms[t]:.1f}" for t in tools]
        spread = "-" if row.spread_ratio is None else f"{row.spread_ratio:.2f}"
        lines.append(f"| {row.concurrency} | " + " | ".join(cells) + f" | {spread} |")
    return lines


def write_results(directory: Path, label: str, started: datetime, results: dict[str, Any],
                  lines: Sequence[str]) -> Path:
    """``<directory>/<date>-<label>.json`` and the markdown report beside it; returns the JSON's path."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{started:%Y-%m-%d}-{label}"
    json_path = stem.parent / f"{stem.name}.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    (stem.parent / f"{stem.name}.md").write_text("\n".join(lines) + "\n")
    return json_path
