"""``versus``: the served ensemble against the same ONNX run in-process, the bare detector and Ultralytics'
``predict``, paired; then where each one's time goes (Triton's trace per step, Ultralytics' own stages).

    python -m loadtest versus --onnx yolov8n.onnx                     # build, serve, measure on this machine
    python -m loadtest versus --onnx yolov8n.onnx --cores 1,2,4,8,16  # each core count pinned with taskset
    python -m loadtest versus --repository runs/repo --url 127.0.0.1:8001   # a server already running

Writes ``<results-dir>/<date>-<label>.json``, a markdown table and a PNG beside it (``runs/versus`` by default).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import LoadTestError
from ..images import load_folder, parse_sizes, synthetic_images
from ..report import write_results
from ..target import address_of, host_of
from ..versus import VersusSettings

logger = logging.getLogger(__name__)
RESULTS_DIR = Path("runs") / "versus"


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise LoadTestError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise LoadTestError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onnx", type=Path, default=None,
                        help="the exported detector the reference runs (default: the repository's source ONNX); "
                        "with --cores or without --repository, also the one built and served")
    parser.add_argument("--repository", type=Path, default=None,
                        help="a built repository to serve (default: built from --onnx with the default options)")
    parser.add_argument("--url", default=None, help="gRPC HOST:PORT of a server already serving --repository")
    parser.add_argument("--metrics-port", type=int, default=8002, help="with --url: Triton's metrics port")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--build-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for the build (repeat), e.g. --build-arg=--max-batch=4; with --cores, "
                        "{cores} becomes each core count (--build-arg=--detector-threads --build-arg={cores})")
    parser.add_argument("--variant-arg", action="append", default=[], metavar="ARG",
                        help="build a second repository with these extra arguments (repeat; beside --build-arg) and "
                        "serve it from the same server as one more side, paired with the first build in every round, "
                        "e.g. --variant-arg=--detector-spin --variant-arg=run; {cores} as for --build-arg")
    parser.add_argument("--cores", default=None,
                        help="core counts, e.g. 1,2,4,8,16: one pinned build, server and measurement per count "
                        "(taskset; the server, its clients and the references share the pinned cores)")
    parser.add_argument("--streams", default="1,4", help="concurrent streams per window (1 = latency)")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds (order alternating)")
    parser.add_argument("--window", type=float, default=4.0, help="seconds per window")
    parser.add_argument("--size", default="1280x720", help="synthetic JPEG frame size (WIDTHxHEIGHT)")
    parser.add_argument("--images", type=Path, default=None, help="a folder of images to send instead")
    parser.add_argument("--no-ultralytics", action="store_true", help="leave Ultralytics' predict out")
    parser.add_argument("--label", default="versus")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)


def settings_of(args: argparse.Namespace) -> VersusSettings:
    return VersusSettings(streams=_ints(args.streams), rounds=args.rounds, window_s=args.window)


def images_of(args: argparse.Namespace) -> list[bytes]:
    return load_folder(args.images, limit=16) if args.images else synthetic_images(parse_sizes(args.size), per_size=4)


@contextlib.contextmanager
def served(args: argparse.Namespace, work: Path) -> Iterator[tuple[Path, str, str, int | None, tuple[str, Path] | None]]:
    """(repository, gRPC address, metrics address, server pid, (HTTP address, trace file)): the given server (no
    pid, no tracing), or this repository on an embedded one with Triton's tracing ready (off until a window)."""
    from ..versus_run import build_repository, free_ports

    repository = args.repository or build_repository(args.onnx, work / "repository", args.build_arg)
    variant = variant_repository(args, work)
    if args.url:
        grpc = address_of(args.url, "grpc")
        yield repository, grpc, f"{host_of(grpc)}:{args.metrics_port}", None, None
        return
    from generator.errors import GeneratorError
    from generator.server.embedded import EmbeddedServer
    from generator.server.environments import stub_environment_for

    from ..trace_steps import trace_flags

    http, grpc_port, metrics = free_ports(3)
    trace_file = work / "trace.json"
    second = (f"--model-repository={variant.resolve()}",) if variant else ()  # Triton serves every one given
    try:
        # The stubs' environment fits both builds (a --cpu-engine openvino variant needs OpenVINO's).
        stub = stub_environment_for([repository, *([variant] if variant else [])])
        with EmbeddedServer(repository, http, grpc_port, metrics, log_file=work / "tritonserver.log",
                            extra_args=(*trace_flags(trace_file), *second), stub=stub) as server:
            pid = server.process.pid if server.process else None
            yield repository, server.grpc_url, server.metrics_url, pid, (server.http_url, trace_file)
    except GeneratorError as exc:
        raise LoadTestError(f"embedded server: {exc}") from exc


def variant_repository(args: argparse.Namespace, work: Path) -> Path | None:
    """The --variant-arg build (the first build's arguments, these, and its own ensemble name), or None."""
    if not args.variant_arg:
        return None
    if args.url or args.repository is not None:
        raise LoadTestError("--variant-arg builds both sides from --onnx and serves them here: not with "
                            "--repository or --url")
    from ..versus_run import build_repository, variant_model

    return build_repository(args.onnx, work / "variant",
                            [*args.build_arg, *args.variant_arg, f"--name={variant_model(args.model)}"])


def run(args: argparse.Namespace) -> int:
    from ..versus_report import report_lines, write_plot
    from ..versus_run import measure, measure_cores

    if args.repository is None and args.onnx is None:
        raise LoadTestError("give --onnx MODEL (built and served here) or --repository DIR")
    if args.url and args.repository is None:
        raise LoadTestError("--url needs --repository DIR: the served repository (its thresholds and source ONNX)")
    started = datetime.now(timezone.utc)
    settings, images = settings_of(args), images_of(args)
    results: dict[str, Any]
    if args.cores:
        if args.url or args.onnx is None:
            raise LoadTestError("--cores builds and serves --onnx under each pinning: give --onnx, not --url")
        results = measure_cores(args, _ints(args.cores), args.results_dir / f"{started:%Y-%m-%d}-{args.label}")
    else:
        with tempfile.TemporaryDirectory(prefix="loadtest-versus-") as tmp, served(args, Path(tmp)) as served_at:
            results = measure(args, served_at, settings, images)
    results = {"label": args.label, "started": started.isoformat(timespec="seconds"), **results}
    lines = report_lines(results)
    written = write_results(args.results_dir, args.label, started, results, lines)
    plot = write_plot(results, written.with_suffix(".png"))
    print("\n".join(lines))
    logger.info("wrote %s, its .md%s", written, f" and {plot.name}" if plot else "")
    return 0
