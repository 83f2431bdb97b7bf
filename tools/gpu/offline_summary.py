"""The offline run's summary (tools/gpu/offline_run.sh): what the device call measured, as markdown on stdout.

    python tools/gpu/offline_summary.py OUT LOGS

Reads the results the project's commands wrote into OUT (``loadtest bench`` JSON under ``bench/``, ``loadtest
engine`` JSON, the Locust summary, the scraped GPU series) and prints: the served ensembles at each concurrency
(images/s, p50/p95, joules per image, the detector step's batch and busy time), the engine alone per batch size
and way, served against engine, the provider agreements, how the GPU series moved, and the
``loadtest versus`` tables it finds under ``versus/``. Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def bench_lines(out: Path) -> list[str]:
    lines = []
    for path in sorted((out / "bench").glob("*.json")):
        data = _load(path)
        if not data:
            continue
        lines += [f"### {data.get('label')}: served ensemble, gRPC, 1280x720 JPEGs", "",
                  "| in flight | img/s | p50 ms | p95 ms | failures | J/image | detector batch | detector busy us/img |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for cell in data.get("ensemble", []):
            p = cell["point"]
            model = (data.get("settings") or {}).get("model", data.get("label"))
            det = cell.get("stages", {}).get(f"{model}_detector") or {}
            busy = sum(det.get(k) or 0 for k in ("compute_input_us", "compute_infer_us", "compute_output_us"))
            energy = (cell.get("gpu_energy") or {}).get("joules_per_image", "-")
            lines.append(f"| {cell['concurrency']} | {p['throughput_rps']} | {p['p50_ms']} | {p['p95_ms']} | "
                         f"{p['failures']} | {energy} | {det.get('avg_batch', '-')} | {round(busy, 1) if det else '-'} |")
        lines.append("")
    return lines


def engine_lines(out: Path) -> list[str]:
    lines = []
    for path in sorted(out.glob("engine-*.json")):
        data = _load(path)
        if not data:
            continue
        lines += [f"### {data.get('model')}: the detector engine alone ({data.get('provider')})", "",
                  "| batch | engine, GPU in/out | engine, host arrays | runner, GPU in | runner, host in |",
                  "|---:|---:|---:|---:|---:|"]
        for size, row in data.get("batches", {}).items():
            cells = [str((row.get(k) or {}).get("images_per_s", "-"))
                     for k in ("engine_device", "engine_host", "runner_device", "runner_host")]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        if data.get("provider_agreement"):
            lines.append(f"\nProvider agreement with the CPU path (control images): {data['provider_agreement']}")
        lines.append("")
    return lines


STEPS = ("preprocess", "detector", "nms")
STEP_TIMES = ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us")


def step_lines(out: Path) -> list[str]:
    """Triton's statistics per step at each bench's best level: where a request's time goes, step by step (ms
    per request; a batched execution's time counts for every request in it)."""
    lines = []
    for path in sorted((out / "bench").glob("*.json")):
        data = _load(path)
        cells = (data or {}).get("ensemble") or []
        if not cells:
            continue
        best = max(cells, key=lambda c: c["point"]["throughput_rps"])
        model = (data.get("settings") or {}).get("model", data.get("label"))
        lines += [f"### {data.get('label')}: per step at {best['concurrency']} in flight "
                  f"({best['point']['throughput_rps']} img/s), ms per request", "",
                  "| step | batch | queue | input | compute | output | whole request |", "|---|---:|---:|---:|---:|---:|---:|"]
        for step in (model, *(f"{model}_{name}" for name in STEPS)):
            stats = best.get("stages", {}).get(step)
            if not stats:
                continue
            times = " | ".join(f"{(stats.get(key) or 0) / 1000:.2f}" for key in STEP_TIMES)
            lines.append(f"| {step} | {stats.get('avg_batch', '-')} | {times} | {(stats.get('request_us') or 0) / 1000:.2f} |")
        lines += ["", *phase_lines(best.get("phases") or {})]
    return lines


def phase_lines(phases: dict[str, Any]) -> list[str]:
    """Each step's phases inside execute (its own timers, generator/serving/phases.py), ms per batch."""
    if not phases:
        return []
    lines = ["Inside each step's execute, ms per batch (the steps' phase timers):", ""]
    for step, record in phases.items():
        parts = ", ".join(f"{phase} {ms:.2f}" for phase, ms in record.get("ms_per_batch", {}).items())
        lines.append(f"- {step} ({record.get('batches')} batches): {parts}")
    return [*lines, ""]


def served_against_engine(out: Path) -> list[str]:
    """Each bench's best images/s against the engine alone for its model at the largest batch (GPU in/out)."""
    lines = []
    for path in sorted((out / "bench").glob("*.json")):
        bench = _load(path)
        if not bench or not bench.get("ensemble"):
            continue
        model = (bench.get("settings") or {}).get("model", bench.get("label"))
        engine = _load(out / f"engine-{model}.json")
        if not engine:
            continue
        best = max(c["point"]["throughput_rps"] for c in bench["ensemble"])
        rows = engine.get("batches", {})
        top = rows.get(max(rows, key=int)) if rows else {}
        ceiling = (top.get("engine_device") or top.get("engine_host") or {}).get("images_per_s")
        if ceiling:
            lines.append(f"- {bench.get('label')}: served {best} img/s at best = {best / ceiling:.0%} of the engine "
                         f"alone at batch {max(rows, key=int)} ({ceiling} img/s)")
    return lines


def gpu_lines(path: Path) -> list[str]:
    """First, min, max and last of every scraped gpu_* series; the energy used over the scrape."""
    series: dict[str, list[float]] = {}
    scrapes = 0
    try:
        text = path.read_text()
    except OSError:
        return ["no GPU series were scraped"]
    for line in text.splitlines():
        if line.startswith("#"):
            scrapes += 1
            continue
        name, _, value = line.rpartition(" ")
        if name:
            series.setdefault(name, []).append(float(value))
    if not series:
        return [f"{scrapes} scrapes of the watchdog endpoint, no gpu_* series (no NVML there)"]
    lines = [f"{scrapes} scrapes, one a second", "", "| series | first | min | max | last |", "|---|---:|---:|---:|---:|"]
    for name, values in sorted(series.items()):
        if "gpu_info" in name:
            continue
        lines.append(f"| `{name}` | {values[0]:.4g} | {min(values):.4g} | {max(values):.4g} | {values[-1]:.4g} |")
    return lines


def main(argv: list[str]) -> int:
    out, logs = Path(argv[1]), Path(argv[2])
    print("# Offline run summary\n")
    steps = (out / "steps.txt").read_text() if (out / "steps.txt").is_file() else "(none)"
    print("Steps:\n```\n" + steps.strip() + "\n```\n")
    for text in (out / "install.txt", out / "int8-load.txt"):
        if text.is_file():
            print(f"{text.name}:\n```\n{text.read_text().strip()[:3000]}\n```\n")
    print("\n".join(bench_lines(out) + step_lines(out) + engine_lines(out) + served_against_engine(out)))
    locust = _load(out / "locust-y11.json")
    if locust:
        c, h = locust["client"], locust["health"]
        print(f"\nLocust cross-check, y11: {c['throughput_rps']:.1f} req/s, p50 {c['p50_ms']} ms, p95 {c['p95_ms']} ms, "
              f"{c['failures']} failed; busiest generator process {h['generator_cpu_percent_avg_busiest_process']}% "
              f"of a core, run {'valid' if h['valid'] else 'NOT valid: ' + '; '.join(h['reasons'])}")
    for report in sorted((out / "versus").glob("*.md")):  # the sweep's own table (per core count: in the tar)
        print("\n" + report.read_text().strip())
    tradeoff = _load(out / "tradeoff.json")
    if tradeoff:
        print("\n## tools/tradeoff.py: the CPU detector's topology\n")
        print("| cores | topology | ensemble p50 c=1 ms | x raw + decode | ensemble rps c=4 | x raw |\n|---:|---|---:|---:|---:|---:|")
        for r in tradeoff["rows"]:
            single, ratio = r.get("c1_vs_raw_plus_decode") or {}, r.get("rps_vs_raw_single") or {}
            print(f"| {r['cores']} | {r['topology']} ({r['instances']} x {r['intra_op_threads']}) | "
                  f"{r['ensemble_p50_c1_ms']} | {single.get('median')} | {r['ensemble_rps_c4']} | {ratio.get('median')} |")
    if not (out / "gpu-metrics.txt").is_file():
        return 0
    print("\n## GPU series during the run\n")
    print("\n".join(gpu_lines(out / "gpu-metrics.txt")))
    print(f"\n(logs: {logs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
