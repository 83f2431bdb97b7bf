"""Latency/throughput-over-time plot of a Locust run, from its ``_stats_history.csv``."""

from __future__ import annotations

import csv
from pathlib import Path

from .errors import RunError


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None  # Locust writes "N/A" before the first response


def read_history(path: Path) -> dict[str, list[float | None]]:  # None: no value yet
    """The aggregated rows of a stats history file as columns: t (s from start), users, rps, p50, p95.

    With ``--csv-full-history`` Locust writes the percentiles of its current window (the last 10 s), not the
    cumulative ones, so the plot shows how latency moves during the run.
    """
    columns: dict[str, list[float | None]] = {"t": [], "users": [], "rps": [], "p50": [], "p95": []}
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("Name") == "Aggregated"]
    if not rows:
        return columns
    start = float(rows[0]["Timestamp"])
    for row in rows:
        columns["t"].append(float(row["Timestamp"]) - start)
        columns["users"].append(_number(row["User Count"]))
        columns["rps"].append(_number(row["Requests/s"]))
        columns["p50"].append(_number(row["50%"]))
        columns["p95"].append(_number(row["95%"]))
    return columns


def plot_history(history_csv: Path, output_png: Path, title: str) -> Path:
    """Write a PNG: p50/p95 latency (left axis) and requests/s (right axis) over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = read_history(history_csv)
    if not data["t"]:
        raise RunError(f"{history_csv} has no aggregated rows to plot")
    fig, latency_axis = plt.subplots(figsize=(9, 4.5), dpi=100)
    def series(name: str) -> list[float]:
        return [float("nan") if v is None else v for v in data[name]]

    t = series("t")
    latency_axis.plot(t, series("p50"), label="p50 latency (last 10 s)", color="tab:blue")
    latency_axis.plot(t, series("p95"), label="p95 latency (last 10 s)", color="tab:red")
    latency_axis.set_xlabel("time since start (s)")
    latency_axis.set_ylabel("latency (ms)")
    latency_axis.set_ylim(bottom=0)
    rate_axis = latency_axis.twinx()
    rate_axis.plot(t, series("rps"), label="requests/s", color="tab:green",
                   linestyle="--")
    rate_axis.set_ylabel("throughput (requests/s)")
    rate_axis.set_ylim(bottom=0)
    handles = latency_axis.get_legend_handles_labels()[0] + rate_axis.get_legend_handles_labels()[0]
    latency_axis.legend(handles, [str(h.get_label()) for h in handles], loc="upper left", fontsize="small")
    latency_axis.set_title(title)
    latency_axis.grid(alpha=0.3)
    fig.tight_layout()
    output_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output_png)
    plt.close(fig)
    return output_png


def plot_soak(t_s: list[float], panels: list[tuple[str, dict[str, list[float]]]], warmup_s: float,
              fits: dict[str, tuple[float, float]], output_png: Path, title: str) -> Path:
    """Write a PNG: one panel per resource (lines per series), the warm-up shaded, fitted growth dashed.

    ``fits`` maps a series name to (value at the end of the warm-up, growth per hour) for the dashed line.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [t / 60.0 for t in t_s]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.4 * len(panels)), dpi=80, sharex=True, squeeze=False)
    for axis, (ylabel, lines) in zip(axes[:, 0], panels, strict=True):
        for name, values in lines.items():
            axis.plot(minutes, values, label=name, linewidth=1.2)
            if name in fits:
                start, per_hour = fits[name]
                end_min = minutes[-1]
                axis.plot([warmup_s / 60.0, end_min], [start, start + per_hour * (end_min - warmup_s / 60.0) / 60.0],
                          linestyle="--", color="black", linewidth=1,
                          label=f"{name} fit: {per_hour:+.1f}/hour")
        axis.axvspan(0, warmup_s / 60.0, color="grey", alpha=0.15)
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
        axis.legend(loc="best", fontsize="x-small")
    axes[-1, 0].set_xlabel("minutes since start (shaded: warm-up, not fitted)")
    axes[0, 0].set_title(title, fontsize="medium")
    fig.tight_layout()
    output_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output_png)
    plt.close(fig)
    return output_png
