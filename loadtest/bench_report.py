"""The bench's markdown report: machine, raw ceiling, ensemble table, per-stage costs, paired rounds, tools."""

from __future__ import annotations

from typing import Any

from .bench import point_of
from .crosscheck import crosscheck_points
from .metrics import StageStats, phases_table, stages_table
from .report import compare_p50, comparison_table, points_table

PAIRED_SUMMARY_LABELS = {
    "ratio_same_topology": "throughput vs raw, same topology",
    "ratio_best_raw": "throughput vs best raw topology",
    "added_p50_c1_ms": "added p50 at concurrency 1 (client, ms)",
    "added_in_triton_c1_ms": "added in Triton at concurrency 1 (ensemble minus detector compute, ms)",
    "decode_p50_ms": "decode and letterbox of one frame in-process (ms)",
    "c1_vs_raw_plus_decode": "p50 at concurrency 1 vs the lone raw session's p50 + decode (1.15 or less: near the "
                             "detector's own)",
    "rps_vs_raw_single": "throughput vs the lone raw session (1 or more: at least the raw detector's)",
}


def _header(results: dict[str, Any]) -> list[str]:
    m, server = results["machine"], results.get("server", {})
    served = server.get("repository") or {}
    source = served.get("source_onnx") or {}
    lines = [
        f"# Benchmark {results['label']} ({results['started']})",
        "",
        f"Machine: {m['cpu_model']}, {m['usable_cores']} usable cores, {m['ram_gib']} GiB RAM, Python {m['python']}, "
        f"onnxruntime {m['packages'].get('onnxruntime')}, Triton {server.get('triton_version')}. "
        f"Load average at start {m['loadavg']}, at end {m.get('loadavg_end')} (the CPU is shared: numbers move with it).",
    ]
    if source.get("name"):
        lines += ["", f"Served: `{source['name']}` (sha256 {str(source.get('sha256'))[:12]}), "
                      f"{served.get('target')} target, {served.get('precision')}."]
    if results.get("note"):
        lines += ["", results["note"]]
    return lines


def _raw_lines(raw: dict[str, Any]) -> list[str]:
    lines = ["", "## (a) Raw detector in-process (ONNX Runtime, letterboxed input)", ""]
    if "batches" not in raw:
        return [*lines, f"skipped: {raw.get('skipped')}"]
    lines += [f"ONNX `{raw['onnx']['name']}` ({raw['baseline']}), intra-op threads {raw['intra_op_threads']}, "
              "spinning worker threads (ONNX Runtime's default), "
              f"input {raw['input']}; one session (the repository serves {raw['instances']} instance(s)).", "",
              "| batch | p50 ms | p95 ms | mean ms | images/s |", "|---:|---:|---:|---:|---:|"]
    return lines + [f"| {b['batch']} | {b['p50_ms']} | {b['p95_ms']} | {b['mean_ms']} | {b['images_per_s']} |"
                    for b in raw["batches"]]


def _cell_lines(cells: list[dict[str, Any]]) -> list[str]:
    lines = ["", "## (b) Ensemble through Triton, closed loop", "", *points_table([point_of(c) for c in cells])]
    energy = [c for c in cells if c.get("gpu_energy")]
    if energy:
        lines += ["", "GPU energy (NVML's counter over each window, every GPU of the host):", "",
                  "| cell | J per image | mean power W |", "|---|---:|---:|"]
        lines += [f"| {c['point']['label']} c={c['concurrency']} | {c['gpu_energy']['joules_per_image']} | "
                  f"{c['gpu_energy']['mean_power_w']} |" for c in energy]
    lines += ["", "## (c) Per-stage costs (Triton metrics, average per request)", ""]
    for cell in cells:
        lines += [f"### {cell['point']['label']}, concurrency {cell['concurrency']}", ""]
        stages = {k: StageStats(**v) for k, v in cell["stages"].items()}
        lines += stages_table(stages)
        if cell.get("phases"):  # the steps' own phase timers (generator/serving/phases.py)
            lines += ["", *phases_table(stages, cell["phases"])]
        lines.append("")
    return lines


def paired_lines(paired: dict[str, Any]) -> list[str]:
    """Markdown: one row per round, then the medians and ranges."""
    if "rounds" not in paired:
        return [f"skipped: {paired.get('skipped')}"]
    s, d = paired["settings"], paired["detector"]
    lines = [
        f"{s['protocol']} {s['size'][0]}x{s['size'][1]} JPEG; {s['rounds']} rounds of {s['window_s']} s windows. "
        f"Raw detector: {d['baseline']}. Raw topologies at batch 1: served = {d['instances']} session(s) x "
        f"intra-op threads {d['intra_op_threads']} (spinning off: the served sessions), single = 1 session with "
        "ONNX Runtime's default topology (a thread per usable core, spinning on: the latency reference), "
        f"per-core = {d['per_core_sessions']} x 1 thread. "
        f"Ensemble throughput at concurrency {s['concurrency']}, latency at concurrency 1.",
        "",
        "| round | raw served img/s | raw single img/s (p50 ms) | raw per-core img/s | ensemble rps | "
        "x same topology | x best raw | x lone raw | ensemble p50 c=1 ms | decode ms | x lone raw + decode | "
        "added p50 ms | added in Triton ms | load 1m |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(paired["rounds"], 1):
        raw = r["raw"]
        lines.append(
            f"| {i} | {raw['served']['images_per_s']} | {raw['single']['images_per_s']} ({raw['single']['p50_ms']}) | "
            f"{raw['per_core']['images_per_s']} | {r['ensemble_rps']} | {r['ratio_same_topology']} | "
            f"{r['ratio_best_raw']} | {r.get('rps_vs_raw_single')} | {r['ensemble_p50_c1_ms']} | "
            f"{r.get('decode_p50_ms')} | {r.get('c1_vs_raw_plus_decode')} | {r['added_p50_c1_ms']} | "
            f"{r['added_in_triton_c1_ms']} | {' -> '.join(map(str, r['loadavg_1m']))} |"
        )
    lines.append("")
    for key, label in PAIRED_SUMMARY_LABELS.items():
        if key in paired["summary"]:
            v = paired["summary"][key]
            lines.append(f"- {label}: median **{v['median']}** (range {v['min']} - {v['max']})")
    return lines


def _crosscheck_lines(check: dict[str, Any], cells: list[dict[str, Any]]) -> list[str]:
    lines = [f"## Cross-check at concurrency {check['concurrency']} (gRPC, {check['size'][0]}x{check['size'][1]})", ""]
    bench_points = [point_of(c) for c in cells if c["protocol"] == "grpc" and c["size"] == check["size"]
                    and c["concurrency"] == check["concurrency"]]
    sets = [bench_points, *crosscheck_points(check)] if bench_points else crosscheck_points(check)
    lines += comparison_table(compare_p50(*sets))
    for tool in ("locust", "perf_analyzer"):
        if "error" in check.get(tool, {}):
            lines.append(f"\n{tool}: not measured -- {check[tool]['error']}")
    lines.append("\nLocust's percentiles are bucketed (two significant digits above 100 ms).")
    return lines


def report_lines(results: dict[str, Any]) -> list[str]:
    """The whole markdown report of one bench run."""
    lines = [*_header(results), *_raw_lines(results.get("raw_detector", {}))]
    cells = results.get("ensemble", [])
    lines += _cell_lines(cells)
    if "paired" in results:
        lines += ["## (d) Paired rounds: raw detector and ensemble in the same minute", "",
                  *paired_lines(results["paired"]), ""]
    if results.get("crosscheck"):
        lines += _crosscheck_lines(results["crosscheck"], cells)
    return lines
