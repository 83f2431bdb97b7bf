"""The detector topology trade-off at several core counts: single-stream latency against throughput.

For each core count N (the first N CPUs this process may use, pinned with ``taskset``) and each detector
topology (instances x ONNX Runtime intra-op threads), this builds the repository under that pinning (so the
build measures its service time on those cores), then runs ``python -m loadtest bench`` paired rounds under the
same pinning: the server, its clients and the raw detector share the N cores. One row per (N, topology):

- c=1 p50 of the ensemble against the raw detector's p50 (one session, a thread per pinned core, spinning) plus the decode
  of the frame, in the same round; 1.15 or less is "near the detector's own";
- throughput at concurrency 4 against that raw session's images/s; 1 or more is "at least the raw detector's".

Lab code (not installed), for a host with more cores than the development machine::

    python -m tools.tradeoff --cores 1,2,4,8,16 --output runs/tradeoff.json
    python -m tools.tradeoff --cores 2 --onnx yolov8n.onnx --rounds 5 --output runs/tradeoff-yolov8n.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from generator.demo import DEMO_ONNX
from generator.server.ports import free_ports
from loadtest.machine import machine_info

# (label, detector instances, intra-op threads per instance as a function of the cores)
TOPOLOGIES: tuple[tuple[str, int, str], ...] = (
    ("2 x N (default)", 2, "all"),
    ("1 x N", 1, "all"),
    ("2 x N/2", 2, "half"),
)


def topologies(cores: int) -> list[tuple[str, int, int]]:
    """(label, instances, intra-op threads) for ``cores``, each distinct topology once (at 1 core they coincide)."""
    rows: list[tuple[str, int, int]] = []
    for label, instances, rule in TOPOLOGIES:
        threads = cores if rule == "all" else max(1, cores // 2)
        if all((i, t) != (instances, threads) for _, i, t in rows):
            rows.append((label, instances, threads))
    return rows


def _cpu_list(count: int) -> str:
    usable = sorted(os.sched_getaffinity(0))
    if count > len(usable):
        raise SystemExit(f"error: --cores asks for {count} cores, this process may use {len(usable)}")
    return ",".join(map(str, usable[:count]))


def _pinned(cpus: str, *args: str) -> None:
    subprocess.run(["taskset", "-c", cpus, sys.executable, *args], check=True)


def _bench(cpus: str, repository: Path, label: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    http, grpc, metrics = free_ports(3)
    _pinned(cpus, "-m", "loadtest", "bench", "--repository", str(repository), "--protocols", "grpc",
            "--sizes", "1280x720", "--concurrency", "1,4", "--duration", str(args.window),
            "--raw-iterations", "5", "--raw-batches", "1", "--crosscheck-concurrency", "0",
            "--paired-rounds", str(args.rounds), "--paired-window", str(args.window), "--paired-concurrency", "4",
            "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
            "--label", label, "--results-dir", str(out))
    (result,) = sorted(out.glob(f"*-{label}.json"))[-1:]
    return dict(json.loads(result.read_text()))


def _median(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def row(cores: int, label: str, instances: int, threads: int, bench: dict[str, Any]) -> dict[str, Any]:
    paired = bench["paired"]
    rounds = paired["rounds"]
    lone = [r["raw"][r["lone_raw"]] for r in rounds]  # the raw session each round's ratios are taken against
    return {
        "cores": cores, "topology": label, "instances": instances, "intra_op_threads": threads,
        "lone_raw": sorted({r["lone_raw"] for r in rounds}),
        "raw_single_p50_ms": round(statistics.median(x["p50_ms"] for x in lone), 1),
        "decode_p50_ms": _median(rounds, "decode_p50_ms"),
        "ensemble_p50_c1_ms": _median(rounds, "ensemble_p50_c1_ms"),
        "c1_vs_raw_plus_decode": paired["summary"].get("c1_vs_raw_plus_decode"),
        "raw_single_images_per_s": round(statistics.median(x["images_per_s"] for x in lone), 2),
        "ensemble_rps_c4": _median(rounds, "ensemble_rps"),
        "rps_vs_raw_single": paired["summary"].get("rps_vs_raw_single"),
        "failures": sum(r["failures"] for r in rounds),
        "loadavg_1m": [rounds[0]["loadavg_1m"][0], rounds[-1]["loadavg_1m"][1]],
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: one line per (cores, topology), medians over the paired rounds and their ranges' medians."""
    lines = ["| cores | topology | lone raw p50 + decode ms | ensemble p50 c=1 ms | x raw + decode | raw img/s | "
             "ensemble rps c=4 | x raw | failures | load 1m |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        single, ratio = r["c1_vs_raw_plus_decode"] or {}, r["rps_vs_raw_single"] or {}
        lines.append(
            f"| {r['cores']} | {r['topology']} ({r['instances']} x {r['intra_op_threads']}) | "
            f"{r['raw_single_p50_ms']} + {r['decode_p50_ms']} | {r['ensemble_p50_c1_ms']} | "
            f"{single.get('median')} ({single.get('min')}-{single.get('max')}) | {r['raw_single_images_per_s']} | "
            f"{r['ensemble_rps_c4']} | {ratio.get('median')} ({ratio.get('min')}-{ratio.get('max')}) | "
            f"{r['failures']} | {' -> '.join(map(str, r['loadavg_1m']))} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tradeoff", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", default="1,2", help="core counts to pin to, e.g. 1,2,4,8,16")
    parser.add_argument("--onnx", type=Path, default=DEMO_ONNX, help="detector to build (default: the demo)")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds per row")
    parser.add_argument("--window", type=float, default=6.0, help="seconds per window")
    parser.add_argument("--output", type=Path, default=Path("runs") / "tradeoff.json")
    args = parser.parse_args(argv)
    if shutil.which("taskset") is None:
        raise SystemExit("error: taskset is missing (Debian package util-linux)")
    started = datetime.now(timezone.utc)
    rows: list[dict[str, Any]] = []
    raw_dir = args.output.with_suffix("")  # the bench results of every row
    with tempfile.TemporaryDirectory(prefix="tradeoff-") as tmp:
        for cores in (int(c) for c in args.cores.split(",")):
            cpus = _cpu_list(cores)
            for label, instances, threads in topologies(cores):
                repository = Path(tmp) / f"repo-{cores}-{instances}x{threads}"
                _pinned(cpus, "-m", "generator", "build", "--onnx", str(args.onnx), "--output", str(repository),
                        "--instances", "1", str(instances), "1", "--detector-threads", str(threads))
                bench = _bench(cpus, repository, f"tradeoff-{cores}c-{instances}x{threads}", raw_dir, args)
                rows.append(row(cores, label, instances, threads, bench))
                print("\n".join(table(rows[-1:])[2:]), flush=True)
    result = {"started": started.isoformat(timespec="seconds"), "onnx": args.onnx.name, "machine": machine_info(),
              "rounds": args.rounds, "window_s": args.window, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print("\n".join(table(rows)))
    print(f"wrote {args.output} (bench runs in {raw_dir}/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
