"""The ``versus`` results as a markdown table (one row per core count and stream count) and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .breakdown_report import breakdown_lines
from .versus import DETECTOR, REFERENCE, SERVED, ULTRALYTICS, VARIANT

COLUMNS = (SERVED, REFERENCE, DETECTOR, ULTRALYTICS)


def _runs(results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(cores, one machine's result) in core order, for a single run or a --cores sweep."""
    if "per_core" in results:
        return sorted(((int(c), r) for c, r in results["per_core"].items()), key=lambda item: item[0])
    return [(int(results["cores"]), results)]


def _cell(spread: dict[str, float] | None, digits: int = 1) -> str:
    if not spread:
        return "-"
    return f"{spread['median']:.{digits}f} ({spread['min']:.{digits}f}-{spread['max']:.{digits}f})"


def _rows(cores: int, run: dict[str, Any]) -> list[str]:
    summary = run["summary"]
    sides = [s for s in COLUMNS if s in summary["sides"]]
    rows = []
    for n in run["settings"]["streams"]:
        for key, what in ([("p50_ms", "p50 ms"), ("rps", "images/s")] if n == 1 else [("rps", "images/s")]):
            ratio_key = "p50_1" if key == "p50_ms" else f"rps_{n}"
            numbers = " | ".join(_cell(summary["sides"][s][str(n)][key]) if s in sides else "-" for s in COLUMNS)
            p95 = " | ".join(_cell(summary["sides"][s][str(n)]["p95_ms"]) if s in sides else "-"
                             for s in (SERVED, ULTRALYTICS))
            ratios = " | ".join(_cell(summary["ratios"].get(other, {}).get(ratio_key), 3) for other in COLUMNS[1:])
            cpu = " / ".join(_cell(summary["sides"][s][str(n)].get("cpu_ms_per_image"), 0) if s in sides else "-"
                             for s in (SERVED, ULTRALYTICS))
            load = f"{run['rounds'][0]['loadavg_1m'][0]} -> {run['rounds'][-1]['loadavg_1m'][1]}"
            rows.append(f"| {cores} | {n} | {what} | {numbers} | {p95} | {ratios} | {cpu} | {load} |")
    return rows


def _variant_lines(runs: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """The first build against the --variant-arg build, both served by the same server, paired in every round."""
    measured = [(cores, run) for cores, run in runs if VARIANT in run["summary"]["sides"]]
    if not measured:
        return []
    lines = ["", f"The build against its variant ({' '.join(measured[0][1][VARIANT]['build_args'])}), both served "
             "by the same server in every round; served / variant below 1 at one stream's p50, or above 1 in "
             "images/s, favours the first build.", "",
             "| cores | streams | measure | served | variant | served / variant | variant / detector | "
             "variant / ultralytics | CPU ms per image, served / variant |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for cores, run in measured:
        summary = run["summary"]
        own = summary.get("variant_ratios", {})
        for n in run["settings"]["streams"]:
            for key, what in ([("p50_ms", "p50 ms"), ("rps", "images/s")] if n == 1 else [("rps", "images/s")]):
                ratio_key = "p50_1" if key == "p50_ms" else f"rps_{n}"
                ratio = summary["ratios"][VARIANT].get(ratio_key)
                theirs = " | ".join(_cell(own.get(other, {}).get(ratio_key), 3) for other in (DETECTOR, ULTRALYTICS))
                cells = [_cell(summary["sides"][side][str(n)][key]) for side in (SERVED, VARIANT)]
                cpu = " / ".join(_cell(summary["sides"][side][str(n)].get("cpu_ms_per_image"), 0)
                                 for side in (SERVED, VARIANT))
                lines.append(f"| {cores} | {n} | {what} | {cells[0]} | {cells[1]} | {_cell(ratio, 3)} | {theirs} "
                             f"| {cpu} |")
    lines += ["", "Issue 35's goals for the variant (its own per-round ratios):", ""]
    lines += _goal_lines(measured, "variant_goals")
    return lines


def _goal_lines(runs: list[tuple[int, dict[str, Any]]], field: str = "goals") -> list[str]:
    return [f"- {cores} cores, {name}: {'met' if goal['met'] else 'not met'} "
            f"({', '.join(f'{k} {v}' for k, v in goal.items() if k not in ('met', 'goal'))})"
            for cores, run in runs for name, goal in run["summary"].get(field, {}).items()]


def report_lines(results: dict[str, Any]) -> list[str]:
    runs = _runs(results)
    first = runs[0][1]
    s = first["settings"]
    lines = [f"# Served against in-process: {results.get('label', 'versus')} ({results.get('started', '')})", "",
             f"Machine: {results['machine']['cpu_model']}, {results['machine']['usable_cores']} usable cores. "
             f"{s['rounds']} paired rounds of {s['window_s']} s windows per side and stream count, order alternating; "
             f"{first['images']['count']} JPEGs of {first['images']['avg_bytes']} bytes on average. Reference: "
             f"{first['reference']['onnx']} in this process ({first['reference']['session']}; "
             f"{first['reference']['decode']}). Medians over the rounds, ranges in brackets; the ratios are served "
             "over the other side within each round (one stream: p50; more: throughput). CPU per image: the server's "
             "processes (Triton and its Python stubs; the gRPC clients not counted) against the reference's process: "
             "the throughput N streams can reach on C cores is at most C x 1000 / that.", ""]
    for side, name in ((ULTRALYTICS, "Ultralytics"), (DETECTOR, "Bare detector")):
        absent = first.get(side, {}).get("absent")
        if absent:
            lines += [f"{name} column absent: {absent}.", ""]
    lines += ["| cores | streams | measure | served | reference | detector | ultralytics | served p95 ms | "
              "ultralytics p95 ms | served / reference | served / detector | served / ultralytics | "
              "CPU ms per image, served / ultralytics | load 1m |",
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for cores, run in runs:
        lines += _rows(cores, run)
    lines += _variant_lines(runs)
    lines += ["", "Goals. Issue 27, against the in-process reference: one stream p50 ratio <= 1.05; 4 streams "
              "throughput ratio >= 1.3 at a p95 ratio <= 1. Issue 35: one stream images/s >= 1.05x Ultralytics'; "
              "a lone request's p50 <= 1.3x the bare detector's; 4 streams >= 1.3x Ultralytics as 4 processes.", ""]
    lines += _goal_lines(runs)
    for cores, run in runs:
        lines += breakdown_lines(cores, run.get("breakdown"))
    return lines


def write_plot(results: dict[str, Any], path: Path) -> Path | None:
    """p50 at one stream and throughput at the most streams, per core count and side, with the rounds' ranges."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = _runs(results)
    streams = runs[0][1]["settings"]["streams"]
    most = max(streams)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [(axes[0], "1", "p50_ms", "p50 at 1 stream (ms, lower is better)")]
    if most > 1:
        panels.append((axes[1], str(most), "rps", f"images/s at {most} streams (higher is better)"))
    x = list(range(len(runs)))
    for axis, n, key, title in panels:
        for offset, side in enumerate((SERVED, REFERENCE, ULTRALYTICS)):
            spreads = [run["summary"]["sides"].get(side, {}).get(n, {}).get(key) for _, run in runs]
            if not any(spreads):
                continue
            xs = [i + (offset - 1) * 0.25 for i, sp in zip(x, spreads, strict=True) if sp]
            mid = [sp["median"] for sp in spreads if sp]
            err = [[sp["median"] - sp["min"] for sp in spreads if sp], [sp["max"] - sp["median"] for sp in spreads if sp]]
            axis.bar(xs, mid, width=0.25, yerr=err, capsize=3, label=side)
        axis.set_xticks(x, [f"{cores} cores" for cores, _ in runs])
        axis.set_title(title)
        axis.legend()
    if most == 1:
        axes[1].set_visible(False)
    fig.suptitle("Served ensemble against the same ONNX in-process (paired rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
