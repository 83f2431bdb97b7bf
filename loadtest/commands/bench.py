"""``bench``: raw detector ceiling, ensemble over gRPC/HTTP at several concurrencies, per-stage costs.

Writes ``<results-dir>/<date>-<label>.json`` (with machine details) and a markdown report next to it;
``runs/bench`` (git-ignored) by default: a run is a measurement, not a source file.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from ..bench import BenchSettings, run_bench
from ..bench_report import report_lines
from ..errors import LoadTestError
from ..images import parse_sizes
from ..paired import PairedSettings
from ..report import write_results
from ..target import Endpoints, address_of, host_of

logger = logging.getLogger(__name__)
RESULTS_DIR = Path("runs") / "bench"


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
    parser.add_argument("--url", default=None,
                        help="gRPC HOST:PORT of a running server to use instead (HTTP and metrics on the same host, "
                        "at --http-port and --metrics-port)")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001, help="gRPC port of the embedded server")
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
        grpc = address_of(args.url, "grpc")
        host = host_of(grpc)
        yield Endpoints(grpc, f"{host}:{args.http_port}", f"{host}:{args.metrics_port}"), "external"
        return
    if args.repository is None:
        raise LoadTestError("give --repository DIR (a built repository to serve) or --url HOST:PORT (a running server)")
    from generator.errors import GeneratorError
    from generator.server.embedded import EmbeddedServer

    try:
        with EmbeddedServer(args.repository, args.http_port, args.grpc_port, args.metrics_port,
                            log_file=work / "tritonserver.log") as server:
            yield Endpoints(server.grpc_url, server.http_url, server.metrics_url), "embedded"
    except GeneratorError as exc:
        raise LoadTestError(f"embedded server: {exc}") from exc


def _settings(args: argparse.Namespace) -> tuple[BenchSettings, PairedSettings | None]:
    protocols = tuple(p.strip() for p in args.protocols.split(",") if p.strip())
    if not protocols or set(protocols) - {"grpc", "http"}:
        raise LoadTestError(f"--protocols takes grpc and/or http, got {args.protocols!r}")
    settings = BenchSettings(
        model=args.model, protocols=protocols, sizes=tuple(parse_sizes(args.sizes)),
        concurrency=_ints(args.concurrency), duration_s=args.duration, raw_iterations=args.raw_iterations,
        raw_batches=_ints(args.raw_batches), crosscheck_concurrency=args.crosscheck_concurrency or None,
        crosscheck_duration_s=args.crosscheck_duration,
    )
    paired = PairedSettings(
        model=args.model, protocol=args.paired_protocol, size=parse_sizes(args.paired_size)[0],
        concurrency=args.paired_concurrency, rounds=args.paired_rounds, window_s=args.paired_window,
    ) if args.paired_rounds else None
    return settings, paired


def run(args: argparse.Namespace) -> int:
    settings, paired = _settings(args)
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="loadtest-bench-") as tmp, _server(args, Path(tmp)) as (endpoints, mode):
        results = {"label": args.label, "note": args.note,
                   **run_bench(endpoints, mode, args.repository, settings, paired, Path(tmp))}
    lines = report_lines(results)
    written = write_results(args.results_dir, args.label, started, results, lines)
    print("\n".join(lines))
    logger.info("wrote %s and its .md", written)
    return 0
