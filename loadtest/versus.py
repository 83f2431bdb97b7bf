"""Served against in-process, side by side: the question a user asks before putting a detector behind a server.

Each round measures, back to back and in an order that alternates from round to round, every side (the served
ensemble over gRPC, the in-process reference of ``reference.py``, and Ultralytics' ``predict`` where installed)
at each stream count: one stream (latency: a camera waiting for its answer) and N concurrent streams (throughput
and its p95: N cameras, the reference with N threads). Ratios are taken within a round, so the machine's drift
between rounds cancels, and their median and range over the rounds say how far to trust them.

The goals of issue 27: at one stream the served p50 within 5 % of the reference's; at 4 streams the served
throughput at least 1.3x the reference's with 4 threads, at a p95 no higher than the reference's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .closed_loop import Infer, closed_loop
from .errors import LoadTestError
from .metrics import snapshot, stage_deltas
from .report import point_from_latencies

logger = logging.getLogger(__name__)
SERVED, REFERENCE, ULTRALYTICS, DETECTOR = "served", "reference", "ultralytics", "detector"
VARIANT = "variant"  # a second build (--variant-arg) served beside the first by the same server, paired with it
SINGLE_STREAM_GOAL = 1.05  # served p50 / reference p50 at one stream, at most
THROUGHPUT_GOAL = 1.3  # served / reference throughput at GOAL_STREAMS, at least
GOAL_STREAMS = 4
# Issue 35, against Ultralytics' predict and the bare detector
ULTRALYTICS_SINGLE_GOAL = 1.05  # served / Ultralytics images/s at one stream, at least
LONE_REQUEST_GOAL = 1.3  # served p50 / the bare detector's p50 at one stream, at most
ULTRALYTICS_STREAMS_GOAL = 1.3  # served / Ultralytics (a process per stream) images/s at GOAL_STREAMS, at least


@dataclass(frozen=True)
class VersusSettings:
    streams: tuple[int, ...] = (1, 4)
    rounds: int = 3
    window_s: float = 4.0
    warmup_requests: int = 2

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.window_s <= 0 or not self.streams or min(self.streams) < 1:
            raise LoadTestError("--rounds, --window and --streams must be positive")


def process_cpu_s(pid: int | None = None, tree: bool = False) -> float:
    """CPU seconds (user + system) of a process (default: this one), its children too with ``tree``; 0 once gone."""
    import psutil

    try:
        process = psutil.Process(pid)
        processes = [process, *process.children(recursive=True)] if tree else [process]
        total = 0.0
        for p in processes:
            with contextlib.suppress(psutil.Error):
                times = p.cpu_times()
                total += times.user + times.system
        return total
    except psutil.Error:
        return 0.0


@dataclass(frozen=True)
class Side:
    """One way of answering a frame: ``make`` gives each closed-loop thread its ``infer``; ``cpu`` counts the CPU
    seconds its own work takes (the server's process tree; this process for the in-process references)."""

    name: str
    make: Callable[[], Callable[[], Infer]]  # called once per window: a fresh per-thread maker
    cpu: Callable[[], float] | None = None


def _window(side: Side, images: list[bytes], streams: int, settings: VersusSettings,
            metrics_url: str | None) -> dict[str, Any]:
    before: dict[str, Any] = {}

    def scrape() -> None:
        before["snapshot"] = snapshot(metrics_url) if metrics_url else None
        before["cpu"] = side.cpu() if side.cpu else None
        before["own_cpu"] = process_cpu_s()

    loop = closed_loop(side.make(), images, streams, settings.window_s, settings.warmup_requests, scrape)
    point = point_from_latencies(side.name, streams, loop.latencies_ms, loop.failures, loop.elapsed_s)
    result: dict[str, Any] = {"rps": point.throughput_rps, "p50_ms": point.p50_ms, "p95_ms": point.p95_ms,
                              "requests": point.requests, "failures": point.failures}
    if loop.errors:
        result["errors"] = loop.errors
    served = len(loop.latencies_ms)
    if side.cpu and before.get("cpu") is not None and served:
        # What one image costs in CPU, whatever the machine's load: the ceiling of N streams is cores / this.
        result["cpu_ms_per_image"] = round((side.cpu() - before["cpu"]) * 1000 / served, 1)
        if metrics_url:  # the served side's clients run in this process
            result["client_cpu_ms_per_image"] = round((process_cpu_s() - before["own_cpu"]) * 1000 / served, 1)
    if before.get("snapshot") is not None and metrics_url:
        stages = stage_deltas(before["snapshot"], snapshot(metrics_url))
        result["stages"] = {name: stage.to_dict() for name, stage in stages.items()}
    return result


def _ratios(record: dict[str, Any], streams: tuple[int, ...], other: str, side: str = SERVED
            ) -> dict[str, float | None]:
    """``side`` (served) over ``other`` within one round: p50 at one stream, throughput and p95 at the others."""
    def ratio(key: str, n: int) -> float | None:
        served, their = record[side][str(n)][key], record[other][str(n)][key]
        return round(served / their, 3) if served and their else None

    out: dict[str, float | None] = {}
    for n in streams:
        if n == 1:
            out["p50_1"] = ratio("p50_ms", 1)
            out["rps_1"] = ratio("rps", 1)
        else:
            out[f"rps_{n}"] = ratio("rps", n)
            out[f"p95_{n}"] = ratio("p95_ms", n)
    return out


def run_rounds(sides: list[Side], images: list[bytes], settings: VersusSettings,
               metrics_url: str | None = None) -> dict[str, Any]:
    """Every side at every stream count, per round, order alternating; per-round ratios against each other side."""
    names = [s.name for s in sides]
    if names[0] != SERVED or len(names) < 2:
        raise LoadTestError("versus needs the served side first and at least one reference")
    rounds: list[dict[str, Any]] = []
    for index in range(settings.rounds):
        order = sides if index % 2 == 0 else sides[::-1]
        record: dict[str, Any] = {"order": [s.name for s in order], "loadavg_1m": [round(os.getloadavg()[0], 2)]}
        for side in order:
            record[side.name] = {str(n): _window(side, images, n, settings,
                                                 metrics_url if side.name == SERVED else None)
                                 for n in settings.streams}
        record["loadavg_1m"].append(round(os.getloadavg()[0], 2))
        record["ratios"] = {other: _ratios(record, settings.streams, other) for other in names[1:]}
        if VARIANT in names:  # the variant build against the same references, for its own goals
            record["variant_ratios"] = {other: _ratios(record, settings.streams, other, VARIANT)
                                        for other in names if other not in (SERVED, VARIANT)}
        rounds.append(record)
        _log_round(index + 1, record, names, settings.streams)
    return {"settings": asdict(settings), "sides": names, "rounds": rounds,
            "summary": summarise(rounds, names, settings.streams)}


def _log_round(index: int, record: dict[str, Any], names: list[str], streams: tuple[int, ...]) -> None:
    cells = []
    for name in names:
        cells.append(name + " " + ", ".join(
            f"{n}: {record[name][str(n)]['rps']} rps p50 {record[name][str(n)]['p50_ms']} p95 "
            f"{record[name][str(n)]['p95_ms']}" for n in streams))
    logger.info("  round %d: %s | load %s", index, " | ".join(cells), record["loadavg_1m"])


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def summarise(rounds: list[dict[str, Any]], names: list[str], streams: tuple[int, ...]) -> dict[str, Any]:
    """Medians and ranges of every side's numbers and of the per-round ratios; the goals against the reference."""
    sides = {name: {str(n): {key: _spread([v for r in rounds if (v := r[name][str(n)].get(key)) is not None])
                             for key in ("rps", "p50_ms", "p95_ms", "cpu_ms_per_image")} for n in streams} for name in names}
    ratios = _ratio_spreads(rounds, "ratios")
    summary = {"sides": sides, "ratios": ratios, "goals": {**goals(ratios.get(REFERENCE, {})), **goals_35(ratios)}}
    if "variant_ratios" in rounds[0]:
        variant = _ratio_spreads(rounds, "variant_ratios")
        summary |= {"variant_ratios": variant, "variant_goals": goals_35(variant)}
    return summary


def _ratio_spreads(rounds: list[dict[str, Any]], field: str) -> dict[str, dict[str, dict[str, float] | None]]:
    """Median and range over the rounds of each per-round ratio in ``field`` (against each other side)."""
    return {other: {key: _spread([v for r in rounds if (v := r[field][other][key]) is not None])
                    for key in rounds[0][field][other]} for other in rounds[0][field]}


def goals(ratios: dict[str, dict[str, float] | None]) -> dict[str, Any]:
    """Issue 27's goals, judged on the medians of the per-round ratios against the in-process reference."""
    out: dict[str, Any] = {}
    single = ratios.get("p50_1")
    if single:
        out["single_stream_p50"] = {"ratio": single["median"], "goal": f"<= {SINGLE_STREAM_GOAL}",
                                    "met": single["median"] <= SINGLE_STREAM_GOAL}
    rps, p95 = ratios.get(f"rps_{GOAL_STREAMS}"), ratios.get(f"p95_{GOAL_STREAMS}")
    if rps and p95:
        out[f"streams_{GOAL_STREAMS}"] = {
            "throughput_ratio": rps["median"], "p95_ratio": p95["median"],
            "goal": f"throughput >= {THROUGHPUT_GOAL}x, p95 <= the reference's",
            "met": rps["median"] >= THROUGHPUT_GOAL and p95["median"] <= 1.0}
    return out


def _goal(spread: dict[str, float] | None, goal: float, at_least: bool) -> dict[str, Any] | None:
    if not spread:
        return None
    met = spread["median"] >= goal if at_least else spread["median"] <= goal
    return {"ratio": spread["median"], "goal": f"{'>=' if at_least else '<='} {goal}", "met": met}


def goals_35(ratios: dict[str, dict[str, dict[str, float] | None]]) -> dict[str, Any]:
    """Issue 35's goals on the medians of the per-round ratios: against Ultralytics' predict (images/s at one
    stream and at 4) and, for a lone request, against the bare detector (p50)."""
    ultra, bare = ratios.get(ULTRALYTICS, {}), ratios.get(DETECTOR, {})
    found = {"ultralytics_1_stream_rps": _goal(ultra.get("rps_1"), ULTRALYTICS_SINGLE_GOAL, True),
             "lone_request_p50_vs_detector": _goal(bare.get("p50_1"), LONE_REQUEST_GOAL, False),
             f"ultralytics_{GOAL_STREAMS}_streams_rps": _goal(ultra.get(f"rps_{GOAL_STREAMS}"),
                                                                ULTRALYTICS_STREAMS_GOAL, True)}
    return {name: goal for name, goal in found.items() if goal is not None}
