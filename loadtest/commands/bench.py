"""``bench``: raw detector ceiling, ensemble over gRPC/HTTP at several concurrencies, per-stage costs.

Writes ``<results-dir>/<date>-<label>.json`` (with machine details) and a markdown table next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..bench import BenchSettings, Endpoints, ensemble_cells, point_of, raw_detector, triton_version
from ..crosscheck import crosscheck, crosscheck_points
from ..errors import LoadTestError
from ..images import parse_sizes, synthetic_images
from ..machine import machine_info
from ..metrics import StageStats, stages_table
from ..paired import PairedSettings, paired_lines, paired_rounds
from ..report import compare_p50, comparison_table, points_table

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise LoadTestError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise LoadTestError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repository", type=Path, default=None,
                        help="built model repository: served by an embedded Triton unless --url is given; "
                        "also the source of the raw-detector ONNX")
    parser.add_argument("--url", default=None, help="use a running server on this HOST instead")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument("--sizes", default="640x480,1280x720", help="JPEG frame sizes (WIDTHxHEIGHT, ...)")
    parser.add_argument("--concurrency", default="1,2,4", help="closed-loop client counts")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per cell")
    parser.add_argument("--raw-iterations", type=int, default=20)
    parser.add_argument("--raw-batches", default="1,4")
    parser.add_argument("--crosscheck-concurrency", type=int, default=2,
                        help="run Locust and perf_analyzer at this concurrency (0: skip)")
    parser.add_argument("--crosscheck-duration", type=float, default=20.0)
    parser.add_argument("--paired-rounds", type=int, default=5,
                        help="alternating raw/ensemble rounds for the headline ratios (0: skip)")
    parser.add_argument("--paired-window", type=float, default=6.0, help="seconds per window of a paired round")
    parser.add_argument("--paired-concurrency", type=int, default=4, help="ensemble concurrency for throughput")
    parser.add_argument("--paired-protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--paired-size", default="1280x720", help="JPEG frame size of the paired rounds")
    parser.add_argument("--label", default="bench", help="results file name: <date>-<label>.json")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--note", default="", help="free text stored with the results")


@contextlib.contextmanager
def _server(args: argparse.Namespace, work: Path) -> Iterator[tuple[Endpoints, str]]:
    if args.url:
        host = args.url.split("://")[-1].rstrip("/")
        yield Endpoints(f"{host}:{args.grpc_port}", f"{host}:{args.http_port}", f"{host}:{args.metrics_port}"), "external"
        return
    if args.repository is None:
        raise LoadTestError("give --repository DIR (a built repository to serve) or --url HOST (a running server)")
    from generator.errors import GeneratorError
    from generator.server.embedded import EmbeddedServer

    log = work / "tritonserver.log"
    try:
        with EmbeddedServer(args.repository, args.http_port, args.grpc_port, args.metrics_port, log_file=log) as server:
            yield Endpoints(server.grpc_url, server.http_url, server.metrics_url), "embedded"
    except GeneratorError as exc:
        raise LoadTestError(f"embedded server: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    settings = BenchSettings(
        model=args.model, protocols=tuple(p.strip() for p in args.protocols.split(",") if p.strip()),
        sizes=tuple(parse_sizes(args.sizes)), concurrency=_ints(args.concurrency), duration_s=args.duration,
        raw_iterations=args.raw_iterations, raw_batches=_ints(args.raw_batches),
        crosscheck_concurrency=args.crosscheck_concurrency or None, crosscheck_duration_s=args.crosscheck_duration,
    )
    if set(settings.protocols) - {"grpc", "http"}:
        raise LoadTestError(f"--protocols takes grpc and/or http, got {args.protocols!r}")
    started = datetime.now(timezone.utc)
    machine = machine_info()
    results: dict[str, Any] = {"label": args.label, "note": args.note, "started": started.isoformat(timespec="seconds"),
                               "machine": machine, "settings": {k: v for k, v in settings.__dict__.items() if k != "extra"}}
    with tempfile.TemporaryDirectory(prefix="loadtest-bench-") as tmp, _server(args, Path(tmp)) as (endpoints, mode):
        results["server"] = {"mode": mode, "triton_version": triton_version(endpoints.http),
                             "endpoints": endpoints.__dict__, "repository": str(args.repository) if args.repository else None}
        if args.repository is not None and (args.repository / "manifest.json").is_file():
            manifest = json.loads((args.repository / "manifest.json").read_text())
            results["server"]["manifest"] = {k: manifest.get(k) for k in ("name", "target", "precision", "source_onnx")}
        if args.repository is not None:
            print("(a) raw detector in-process ...", flush=True)
            results["raw_detector"] = raw_detector(
                args.repository, args.model, synthetic_images([settings.sizes[0]], per_size=4),
                settings.raw_iterations, settings.raw_batches,
            )
        else:
            results["raw_detector"] = {"skipped": "no --repository to take the detector ONNX from"}
        print("(b) ensemble, closed loop ...", flush=True)
        results["ensemble"] = ensemble_cells(endpoints, settings, progress=lambda line: print(line, flush=True))
        if args.paired_rounds and args.repository is not None:
            paired = PairedSettings(
                model=settings.model, protocol=args.paired_protocol, size=parse_sizes(args.paired_size)[0],
                concurrency=args.paired_concurrency, rounds=args.paired_rounds, window_s=args.paired_window,
            )
            print(f"(d) paired rounds: raw detector and ensemble alternating ({paired.rounds} rounds) ...", flush=True)
            results["paired"] = paired_rounds(endpoints.grpc, endpoints.http, endpoints.metrics, args.repository,
                                              paired, progress=lambda line: print(line, flush=True))
        if settings.crosscheck_concurrency:
            print(f"cross-check: Locust and perf_analyzer at concurrency {settings.crosscheck_concurrency} ...", flush=True)
            same = [c for c in results["ensemble"] if c["protocol"] == "grpc" and c["size"] == list(settings.sizes[0])
                    and c["concurrency"] == settings.crosscheck_concurrency]
            rate = same[0]["point"]["throughput_rps"] if same else 2.0
            results["crosscheck"] = crosscheck(
                endpoints.grpc, endpoints.metrics, settings.model, settings.sizes[0], settings.images_per_size,
                settings.crosscheck_concurrency, settings.crosscheck_duration_s, Path(tmp) / "crosscheck",
                request_count=max(10, round(rate * settings.crosscheck_duration_s)),
            )
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    results["machine"]["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    lines = report_lines(results)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{started:%Y-%m-%d}-{args.label}"
    (args.results_dir / f"{stem}.json").write_text(json.dumps(results, indent=2))
    (args.results_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {args.results_dir / (stem + '.json')} and .md")
    return 0


def report_lines(results: dict[str, Any]) -> list[str]:
    """The markdown report: machine, raw ceiling, ensemble table, per-stage costs, tool comparison."""
    m = results["machine"]
    lines = [
        f"# Benchmark {results['label']} ({results['started']})",
        "",
        f"Machine: {m['cpu_model']}, {m['usable_cores']} usable cores, {m['ram_gib']} GiB RAM, Python {m['python']}, "
        f"onnxruntime {m['packages'].get('onnxruntime')}, Triton {results.get('server', {}).get('triton_version')}. "
        f"Load average at start {m['loadavg']}, at end {m.get('loadavg_end')} (the CPU is shared: numbers move with it).",
    ]
    if results.get("note"):
        lines += ["", results["note"]]
    raw = results.get("raw_detector", {})
    lines += ["", "## (a) Raw detector in-process (ONNX Runtime, letterboxed input)", ""]
    if "batches" in raw:
        lines += [f"ONNX `{Path(raw['onnx']).name}` ({raw.get('baseline', 'served graph')}), intra-op threads {raw['intra_op_threads']}, "
                  f"{'spinning worker threads (ONNX Runtime default)' if raw.get('spinning') else 'no spinning'}, "
                  f"input {raw['input']}; "
                  f"one session (the repository serves {raw.get('instances', 1)} instance(s)).", "",
                  "| batch | p50 ms | p95 ms | mean ms | images/s |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {b['batch']} | {b['p50_ms']} | {b['p95_ms']} | {b['mean_ms']} | {b['images_per_s']} |"
                  for b in raw["batches"]]
    else:
        lines.append(f"skipped: {raw.get('skipped')}")
    cells = results.get("ensemble", [])
    lines += ["", "## (b) Ensemble through Triton, closed loop", ""]
    lines += points_table([point_of(c) for c in cells])
    lines += ["", "## (c) Per-stage costs (Triton metrics, average per request)", ""]
    for cell in cells:
        lines += [f"### {cell['point']['label']}, concurrency {cell['concurrency']}", ""]
        lines += stages_table({k: StageStats(**v) for k, v in cell["stages"].items()})
        lines.append("")
    if "paired" in results:
        lines += ["## (d) Paired rounds: raw detector and ensemble in the same minute", ""]
        lines += paired_lines(results["paired"])
        lines.append("")
    check = results.get("crosscheck")
    if check:
        lines += [f"## Cross-check at concurrency {check['concurrency']} (gRPC, {check['size'][0]}x{check['size'][1]})", ""]
        bench_points = [point_of(c) for c in cells if c["protocol"] == "grpc" and c["size"] == check["size"]
                        and c["concurrency"] == check["concurrency"]]
        sets = [bench_points, *crosscheck_points(check)] if bench_points else crosscheck_points(check)
        lines += comparison_table(compare_p50(*sets))
        for tool in ("locust", "perf_analyzer"):
            if "error" in check.get(tool, {}):
                lines.append(f"\n{tool}: not measured -- {check[tool]['error']}")
        lines.append("\nLocust's percentiles are bucketed (two significant digits above 100 ms).")
    return lines
