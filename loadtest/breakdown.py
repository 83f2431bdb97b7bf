"""``versus``'s decomposition: where one frame's time goes, served and in Ultralytics, at one stream and at peak.

After the paired rounds, one more window per stream count for each: the served ensemble with Triton tracing every
request (``trace_steps``: each step's hop, queue, input, compute, output, and the front door), and Ultralytics'
workers with their own stage timers (decode timed apart; ``Results.speed``'s preprocess, inference, postprocess).
Tracing costs a little, so these windows give the shares, and the rounds give the rates.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

from generator.serving.contract import STEPS, step_model_name

from .closed_loop import closed_loop
from .errors import LoadTestError
from .metrics import phase_deltas, published_phases, settled_deltas, snapshot
from .trace_steps import decompose, read_window, traced
from .ultralytics_procs import UltralyticsProcesses
from .versus import Side, VersusSettings

logger = logging.getLogger(__name__)
STAGES = ("preprocess", "inference", "postprocess")


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def served_steps(side: Side, images: list[bytes], streams: int, settings: VersusSettings,
                 trace: tuple[str, Path], model: str, metrics: str | None = None) -> dict[str, Any]:
    """One traced window of the served side: Triton's decomposition beside the client's own p50, and with
    ``metrics`` each step's phases inside ``execute`` over the same window (``phases``, beside Triton's ``stages``)."""
    http_url, trace_file = trace
    before: dict[str, Any] = {}
    steps_of = tuple(step_model_name(model, step) for step in STEPS)

    def scrape() -> None:
        if metrics:
            before["phases"] = published_phases(metrics, steps_of)
            before["stages"] = snapshot(metrics)

    with traced(http_url, trace_file) as window:
        loop = closed_loop(side.make(), images, streams, settings.window_s, settings.warmup_requests, scrape)
    sent = len(loop.latencies_ms) + loop.failures + streams * settings.warmup_requests
    steps = decompose(read_window(trace_file, (window[0], window[1]), sent), model=model)
    if metrics and before:
        stages = settled_deltas(metrics, before["stages"], steps_of, len(loop.latencies_ms))
        steps["stages"] = {name: stages[name].to_dict() for name in steps_of if name in stages}
        steps["phases"] = phase_deltas(before["phases"], published_phases(metrics, steps_of))
    client = _p50(loop.latencies_ms)
    steps["client_p50_ms"] = client
    if client is not None and steps.get("server_ms") is not None:
        steps["client_side_ms"] = round(client - steps["server_ms"], 2)  # client, gRPC and loopback
    return steps


def ultralytics_stages(ultra: UltralyticsProcesses, images: list[bytes], streams: int,
                       settings: VersusSettings) -> dict[str, Any]:
    """One window of Ultralytics' workers: medians of the decode and of its own three stages."""
    ultra.stages.clear()
    loop = closed_loop(ultra.factory(), images, streams, settings.window_s, settings.warmup_requests)
    frames = list(ultra.stages)
    out: dict[str, Any] = {"frames": len(frames), "p50_ms": _p50(loop.latencies_ms),
                           "decode_ms": _p50([decode for decode, _ in frames])}
    for stage in STAGES:
        out[f"{stage}_ms"] = _p50([speed[stage] for _, speed in frames if speed.get(stage) is not None])
    return out


def breakdown(served: Side, ultra: UltralyticsProcesses | None, trace: tuple[str, Path] | None, model: str,
              images: list[bytes], settings: VersusSettings, metrics: str | None = None) -> dict[str, Any]:
    """The decomposition at one stream and at the most streams of ``settings``; a reason where a part cannot run."""
    counts = sorted({1, max(settings.streams)})
    out: dict[str, Any] = {"streams": counts}
    if trace is None:
        out["served"] = {"absent": "an external server: trace it with Triton's own --trace-config"}
    else:
        try:
            out["served"] = {str(n): served_steps(served, images, n, settings, trace, model, metrics)
                             for n in counts}
        except LoadTestError as exc:
            out["served"] = {"absent": str(exc)}
            logger.warning("served decomposition absent: %s", exc)
    if ultra is not None:
        out["ultralytics"] = {str(n): ultralytics_stages(ultra, images, n, settings) for n in counts}
    return out
