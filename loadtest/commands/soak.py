"""``soak``: steady traffic with bad images for a long time; fails when the server's memory, fds or shm grow.

Writes ``samples.csv``, ``soak.png`` and ``summary.json`` into ``--out``; exit code 2 when the verdict fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import LoadTestError
from ..hostile import bad_images
from ..images import build_corpus
from ..locust_run import parse_duration
from ..machine import machine_info
from ..provenance import repository_record
from ..resources import listening_pid
from ..soak import SoakSettings, run_soak
from ..soak_report import Limits, plot, summarise, write_samples
from ..target import address_of

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repository", type=Path, default=None, help="built repository to serve (embedded Triton)")
    parser.add_argument("--url", default=None, help="a running server on this machine instead (HOST:PORT)")
    parser.add_argument("--server-pid", type=int, default=None,
                        help="with --url: tritonserver's pid (default: the process listening on the URL's port)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--duration", default="30m", help="e.g. 30m, 2h, 45s")
    parser.add_argument("--warmup", default=None,
                        help="left out of the growth fit (default: a fifth of the run, at most 5m)")
    parser.add_argument("--sample-interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--concurrency", type=int, default=2, help="client threads")
    parser.add_argument("--rate", type=float, default=10.0, help="requests/s of all clients together (0: no limit)")
    parser.add_argument("--bad-every", type=int, default=10, help="every N-th request is a bad image (0: none)")
    parser.add_argument("--sizes", default="640x480,1280x720", help="sizes of the good JPEG frames")
    parser.add_argument("--images-per-size", type=int, default=2)
    parser.add_argument("--max-rss-growth-mb-per-hour", type=float, default=Limits.rss_total_mb,
                        help="limit on the server's and its stubs' RSS together")
    parser.add_argument("--max-fd-growth-per-hour", type=float, default=Limits.fds_total)
    parser.add_argument("--max-shm-growth-mb-per-hour", type=float, default=Limits.shm_mb)
    parser.add_argument("--http-port", type=int, default=8000, help="embedded server ports")
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: runs/soak/<time>)")


def _settings(args: argparse.Namespace) -> SoakSettings:
    duration = parse_duration(args.duration)
    warmup = parse_duration(args.warmup) if args.warmup else min(300.0, duration / 5)
    return SoakSettings(duration_s=duration, model=args.model, protocol=args.protocol, concurrency=args.concurrency,
                        rate_rps=args.rate, bad_every=args.bad_every, sample_interval_s=args.sample_interval,
                        warmup_s=warmup)


@contextlib.contextmanager
def _server(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(address, tritonserver pid, what it serves) of an attached or a freshly started embedded server."""
    if args.url:
        address = address_of(args.url, args.protocol)
        port = int(address.split("/", 1)[0].rpartition(":")[2])
        yield address, args.server_pid or listening_pid(port), {"mode": "attached"}
        return
    if args.repository is None:
        raise LoadTestError("give --repository DIR (a built repository to serve) or --url HOST:PORT (a running server)")
    from generator.errors import GeneratorError
    from generator.server.embedded import EmbeddedServer

    server = EmbeddedServer(args.repository, args.http_port, args.grpc_port, args.metrics_port,
                            log_file=work / "tritonserver.log")
    try:
        with server:
            assert server.process is not None
            address = server.grpc_url if args.protocol == "grpc" else server.http_url
            yield address, server.process.pid, {"mode": "embedded", "repository": repository_record(args.repository)}
    except GeneratorError as exc:
        raise LoadTestError(f"embedded server: {exc}") from exc


def _measure(args: argparse.Namespace, settings: SoakSettings, limits: Limits) -> tuple[dict[str, Any], list[Any]]:
    good = build_corpus(None, args.sizes, args.images_per_size)
    started = datetime.now(timezone.utc)
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="loadtest-soak-") as tmp:
        with _server(args, Path(tmp)) as (address, pid, served):
            samples, traffic, processes, stopped = run_soak(address, pid, settings, good, bad_images())
        problems = [stopped] if stopped else []
        if served["mode"] == "embedded" and (left := processes.regions_left()):
            problems.append(f"{len(left)} /dev/shm region(s) of the stubs outlived the server: {', '.join(left)}")
    summary = {"started": started.isoformat(timespec="seconds"),
               "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "server": served, **summarise(settings, limits, samples, traffic, problems),
               "machine": {**machine, "loadavg_end": [round(v, 2) for v in os.getloadavg()]}}
    return summary, samples


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    limits = Limits(args.max_rss_growth_mb_per_hour, args.max_fd_growth_per_hour, args.max_shm_growth_mb_per_hour)
    out: Path = args.out or Path("runs") / "soak" / f"{datetime.now():%Y-%m-%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    summary, samples = _measure(args, settings, limits)
    summary["files"] = {"samples": write_samples(samples, out / "samples.csv").name}
    summary["files"]["plot"] = plot(samples, summary, out / "soak.png", _title(summary)).name
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for name, g in summary["growth_per_hour"].items():
        print(f"{name}: {g['per_hour']:+.2f} {g['unit']}/hour after the warm-up ({g['first']:.1f} -> {g['last']:.1f})")
    verdict = summary["verdict"]
    print("PASSED" if verdict["passed"] else "FAILED: " + "; ".join(verdict["reasons"]))
    logger.info("reports in %s", out)
    return 0 if verdict["passed"] else 2


def _title(summary: dict[str, Any]) -> str:
    g = summary["growth_per_hour"]
    state = "passed" if summary["verdict"]["passed"] else "FAILED"
    seconds = summary["settings"]["duration_s"]
    length = f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
    return (f"soak {length}, {state}: RSS {g['rss_total_mb']['per_hour']:+.1f} "
            f"MB/h, fds {g['fds_total']['per_hour']:+.1f}/h, shm {g['shm_mb']['per_hour']:+.1f} MB/h")
