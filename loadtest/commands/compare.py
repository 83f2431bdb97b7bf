"""``compare``: two running servers in alternating windows (a before/after on a busy machine).

Writes ``<results-dir>/<date>-<label>.json`` and a markdown table beside it (``runs/compare`` by default).
"""

from __future__ import annotations

import argparse
import logging
import os
from datetime import datetime, timezone
from pathlib import Path

from ..compare import CompareSettings, compare_lines, compare_servers
from ..errors import LoadTestError
from ..images import parse_sizes
from ..machine import machine_info
from ..report import write_results
from ..target import address_of

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", action="append", default=[], metavar="NAME=URL",
                        help="a server to compare, twice: the first is the baseline (e.g. before=127.0.0.1:8001)")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--size", default="1280x720", help="JPEG frame size")
    parser.add_argument("--concurrency", type=int, default=4, help="clients in the throughput window")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=6.0, help="seconds per window")
    parser.add_argument("--label", default="compare")
    parser.add_argument("--results-dir", type=Path, default=Path("runs") / "compare")


def _servers(specs: list[str], protocol: str) -> dict[str, str]:
    servers: dict[str, str] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url or name in servers:
            raise LoadTestError(f"--server takes NAME=URL with two different names, got {spec!r}")
        servers[name] = address_of(url, protocol)
    if len(servers) != 2:
        raise LoadTestError("give --server twice: --server before=HOST:PORT --server after=HOST:PORT")
    return servers


def run(args: argparse.Namespace) -> int:
    servers = _servers(args.server, args.protocol)
    settings = CompareSettings(model=args.model, protocol=args.protocol, size=parse_sizes(args.size)[0],
                               concurrency=args.concurrency, rounds=args.rounds, window_s=args.window)
    started = datetime.now(timezone.utc)
    machine = machine_info()
    result = {"label": args.label, "started": started.isoformat(timespec="seconds"), "machine": machine,
              **compare_servers(servers, settings)}
    machine["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    lines = [f"# Compare {args.label} ({result['started']})", "",
             f"Machine: {machine['cpu_model']}, {machine['usable_cores']} usable cores; load average at start "
             f"{machine['loadavg']}, at end {machine['loadavg_end']}.", "", *compare_lines(result)]
    written = write_results(args.results_dir, args.label, started, result, lines)
    print("\n".join(lines))
    logger.info("wrote %s and its .md", written)
    return 0
