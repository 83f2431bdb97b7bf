"""The sizing ramp as one record: levels, the measured and the predicted stream count, memory; JSON and a plot."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .memory_budget import MemoryBudget, memory_lines, memory_record
from .sizing import Limits, MemoryWatch, Target, detector_ms_per_request, measure, predicted_streams, ramp
from .sizing import snapshot_or_none as _snapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ramp:
    limits: Limits
    utilisation: float
    warmup_s: float
    window_s: float
    max_streams: int
    metrics_url: str | None
    server_pid: int | None
    budget: MemoryBudget | None = None


def run_sizing(target: Target, frames: list[bytes], plan: Ramp) -> dict[str, Any]:
    """Measure one stream (t_frame, t_inf), ramp, and collect everything the report needs."""
    levels: dict[int, dict[str, Any]] = {}
    watch = MemoryWatch(plan.server_pid)
    idle_rss, idle_vram = watch.now()  # before any stream: the footprint each level's peak is set against
    watch.start()

    def level(n: int) -> dict[str, Any]:
        if n not in levels:
            before = _snapshot(plan.metrics_url) if n == 1 else None
            watch.begin_level()
            result = measure(n, target, frames, plan.limits.fps, plan.warmup_s, plan.window_s)
            watch.sample()
            if n == 1:
                result["t_inf_ms"] = detector_ms_per_request(before, _snapshot(plan.metrics_url), target.model)
            result["rss_peak_mb"] = None if watch.level_rss_peak_mb is None else round(watch.level_rss_peak_mb, 1)
            result["vram_peak_mb"] = None if watch.level_vram_peak_mb is None else round(watch.level_vram_peak_mb, 1)
            result["breaches"] = plan.limits.breaches(result) + (plan.budget.breaches(result) if plan.budget else [])
            result["passed"] = not result["breaches"]
            result["rss_peak_mb_so_far"] = None if watch.rss_peak_mb is None else round(watch.rss_peak_mb, 1)
            levels[n] = result
            logger.info("%3d streams: %s", n, level_line(result))
        return levels[n]

    try:
        one = level(1)
        found = ramp(lambda n: bool(level(n)["passed"]), plan.max_streams)
    finally:
        watch.stop()
    t_frame = one["per_stream"][0]["mean_ms"]  # the mean, as the formula (and Triton's t_inf) are averages
    t_inf = one.get("t_inf_ms")
    prediction = predicted_streams(t_frame, plan.limits.fps, plan.utilisation) if t_frame else None
    return {
        "limits": asdict(plan.limits), "utilisation": plan.utilisation,
        "window_s": plan.window_s, "warmup_s": plan.warmup_s, "max_streams": plan.max_streams,
        "measured_streams": found, "predicted_streams": prediction,
        "t_frame_ms": t_frame, "t_inf_ms": t_inf,
        "alpha_ms": round(t_frame - t_inf, 2) if t_frame is not None and t_inf is not None else None,
        "memory": {"rss_peak_mb": None if watch.rss_peak_mb is None else round(watch.rss_peak_mb, 1),
                   "vram_peak_mb": None if watch.vram_peak_mb is None else round(watch.vram_peak_mb, 1),
                   "server_pid": plan.server_pid, "vram_source": watch.vram_source,
                   **memory_record([levels[n] for n in sorted(levels)],
                                   {"rss_mb": None if idle_rss is None else round(idle_rss, 1),
                                    "vram_mb": None if idle_vram is None else round(idle_vram, 1)}, plan.budget)},
        "levels": [levels[n] for n in sorted(levels)],
    }


def level_line(result: dict[str, Any]) -> str:
    p95 = result["worst_p95_ms"]
    verdict = "pass" if result.get("passed") else "FAIL: " + "; ".join(result.get("breaches", []))
    return (f"worst p95 {'-' if p95 is None else f'{p95:.0f} ms'}, worst drop rate {result['worst_drop_rate']:.1%}, "
            f"{result['answered_fps']:.1f} frames/s answered, {result['failed']} failed, load generator "
            f"{result['generator_cpu_percent']:.0f}% of a core, load average {result['loadavg_end']:.1f}: {verdict}")


def summary_lines(record: dict[str, Any]) -> list[str]:
    limits = record["limits"]
    memory = record["memory"]
    t_inf = record["t_inf_ms"]
    lines = [
        f"largest N within the limits (p95 <= {limits['p95_ms']:g} ms, drop rate <= {limits['max_drop']:.1%}, "
        f"no failures) at {limits['fps']:g} frames/s: {record['measured_streams']} streams",
        f"formula: floor(1 / (t_frame x fps) x U) = {record['predicted_streams']} streams "
        f"(t_frame {record['t_frame_ms']} ms, the mean at one stream"
        + (f" = t_inf {t_inf} ms + alpha {record['alpha_ms']} ms" if t_inf is not None else "")
        + f", U {record['utilisation']:g})",
        "memory peak: server RSS " + ("n/a (not on this machine)" if memory["rss_peak_mb"] is None
                                      else f"{memory['rss_peak_mb']:.0f} MiB")
        + ", VRAM " + ("absent (no NVML or no GPU)" if memory["vram_peak_mb"] is None
                       else f"{memory['vram_peak_mb']:.0f} MiB"),
        *memory_lines(memory),
    ]
    return lines


def plot_sizing(record: dict[str, Any], output_png: Path, title: str) -> Path:
    """Worst-stream p95 and drop rate per level, the limits dashed, measured and predicted N marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    levels = record["levels"]
    n = [lv["streams"] for lv in levels]
    fig, latency = plt.subplots(figsize=(9, 4.5), dpi=100)
    latency.plot(n, [lv["worst_p95_ms"] or float("nan") for lv in levels], "o-", color="tab:red",
                 label="worst stream p95 (ms)")
    latency.axhline(record["limits"]["p95_ms"], color="tab:red", linestyle=":", label="p95 limit")
    latency.set_xlabel("concurrent streams")
    latency.xaxis.set_major_locator(MaxNLocator(integer=True))
    latency.set_ylabel("end-to-end p95 (ms)")
    latency.set_ylim(bottom=0)
    drops = latency.twinx()
    drops.plot(n, [lv["worst_drop_rate"] * 100 for lv in levels], "s--", color="tab:blue",
               label="worst stream drop rate (%)")
    drops.axhline(record["limits"]["max_drop"] * 100, color="tab:blue", linestyle=":", label="drop limit")
    drops.set_ylabel("dropped frames (%)")
    drops.set_ylim(bottom=0)
    latency.axvline(record["measured_streams"], color="tab:green", label=f"measured: {record['measured_streams']}")
    if record["predicted_streams"] is not None:
        latency.axvline(record["predicted_streams"], color="grey", linestyle="--",
                        label=f"formula: {record['predicted_streams']}")
    handles = latency.get_legend_handles_labels()[0] + drops.get_legend_handles_labels()[0]
    latency.legend(handles, [str(h.get_label()) for h in handles], loc="upper left", fontsize="small")
    latency.set_title(title, fontsize="medium")
    latency.grid(alpha=0.3)
    fig.tight_layout()
    output_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output_png)
    plt.close(fig)
    return output_png
