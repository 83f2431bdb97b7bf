"""Does Triton's batcher leave requests waiting behind a free instance? One build per instance count, same load.

Each variant is the default build of the detector with ``--instances`` changed, served alone by the embedded
Triton with every request traced; the same load runs against each in turn, in rounds: closed-loop streams of
1280x720 JPEGs, then bursts of 12 requests 6 at a time (the concurrent-request test's shape). From the traces,
``loadtest.idle_wait`` gives each step's idle wait: time a queued request waited while an instance of the step was
free (generator/builder/stages/config/stranding.py says why that happens under a queue policy).

    python -m tools.batcher_stranding --variants "1 2 1" "2 2 2" --streams 2 4 --seconds 12 --rounds 2

Prints one line per variant, load and round; writes every line as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.hardening import admin_access
from generator.server.ports import free_port
from loadtest.idle_wait import idle_waits, summary
from loadtest.images import synthetic_images
from loadtest.trace_steps import read_traces

NAME = "yolo"
STEPS = ("preprocess", "detector", "nms")


def _trace_args(trace_file: Path) -> tuple[str, ...]:
    """Every request traced from the start (the admin API that turns tracing on is closed by default)."""
    return ("--trace-config", "mode=triton", "--trace-config", f"triton,file={trace_file}", "--trace-config",
            "level=TIMESTAMPS", "--trace-config", "rate=1", "--trace-config", "count=-1",
            "--trace-config", "log_frequency=0")


def _infer(url: str, image: bytes) -> None:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=object).reshape(1, 1))
    client.infer(NAME, [tensor])


def _timed(url: str, image: bytes, latencies: list[float], errors: list[str]) -> None:
    started = time.perf_counter()
    try:
        _infer(url, image)
        latencies.append((time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001 - a refusal is a result here
        errors.append(str(exc)[:120])


def _streams(url: str, images: list[bytes], streams: int, seconds: float) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []

    def stream(k: int) -> None:
        end, i = time.perf_counter() + seconds, k
        while time.perf_counter() < end:
            _timed(url, images[i % len(images)], latencies, errors)
            i += 1
    threads = [threading.Thread(target=stream, args=(k,)) for k in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors


def _bursts(url: str, images: list[bytes], bursts: int) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    for _ in range(bursts):
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda image: _timed(url, image, latencies, errors), images[:12]))
    return latencies, errors


def _serve(repo: Path, work: Path, load: Callable[[str], tuple[list[float], list[str]]],
           instances: dict[str, int]) -> dict[str, Any]:
    trace_file = work / "trace.json"
    trace_file.unlink(missing_ok=True)
    server = EmbeddedServer(repo, free_port(), free_port(), free_port(), log_file=work / "server.log",
                            admin=admin_access(environ={}), extra_args=_trace_args(trace_file))
    server.start()
    try:
        server.wait_ready(300)
        started = time.monotonic_ns()
        latencies, errors = load(server.grpc_url)
    finally:
        server.stop()  # Triton writes the trace file whole at shutdown
    tops = [t for t in read_traces(trace_file) if t.model == NAME and t.stamps.get("REQUEST_START", 0) >= started]
    waits = idle_waits(tops, instances)
    ordered = sorted(latencies)
    return {"requests": len(latencies) + len(errors), "errors": len(errors),
            "p50_ms": statistics.median(ordered) if ordered else None,
            "p90_ms": ordered[int(len(ordered) * 0.9)] if ordered else None,
            "max_ms": ordered[-1] if ordered else None,
            "idle_wait": {model.removeprefix(f"{NAME}_"): summary(w) for model, w in sorted(waits.items())}}


def _build(onnx: Path, counts: tuple[int, int, int], out: Path) -> Path:
    repo = out / ("repo-" + "-".join(map(str, counts)))
    if not repo.exists():
        build_repository(onnx, repo, BuildOptions(name=NAME, instances=counts))
    return repo


def _line(result: dict[str, Any]) -> str:
    waits = "; ".join(f"{step} {w['over']}/{w['requests']} over 5 ms (mean {w['mean_over_ms']:.1f}, max "
                      f"{w['max_ms']:.0f}, {w['full_sleeps']} of 400+)" for step, w in result["idle_wait"].items())
    return (f"{result['variant']:>7} {result['load']:>9} round {result['round']}: {result['requests']} requests, "
            f"{result['errors']} failed, p50 {result['p50_ms']:.0f} p90 {result['p90_ms']:.0f} max "
            f"{result['max_ms']:.0f} ms | idle wait: {waits}")


def _counts(variant: str) -> tuple[int, int, int]:
    pre, detector, nms = (int(word) for word in variant.split())
    return pre, detector, nms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, default=DEMO_ONNX)
    parser.add_argument("--variants", nargs="+", default=["1 2 1", "2 2 2"], help="--instances of each build")
    parser.add_argument("--streams", nargs="*", type=int, default=[2, 4],
                        help="closed-loop stream counts (none: bursts only)")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--bursts", type=int, default=20, help="bursts of 12 requests, 6 at a time (0: none)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("runs/stranding"))
    parser.add_argument("--out", type=Path, default=Path("runs/stranding/results.jsonl"))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    images = synthetic_images([(1280, 720)], per_size=12, seed=300)
    variants = {v: _counts(v) for v in args.variants}
    repos = {v: _build(args.onnx, counts, args.work) for v, counts in variants.items()}
    loads: dict[str, Callable[[str], tuple[list[float], list[str]]]] = {
        f"{s} streams": partial(_streams, images=images, streams=s, seconds=args.seconds) for s in args.streams}
    if args.bursts:
        loads["bursts"] = partial(_bursts, images=images, bursts=args.bursts)
    with args.out.open("a") as out:
        for round_ in range(1, args.rounds + 1):
            for load_name, load in loads.items():
                for variant, counts in variants.items():
                    instances = {f"{NAME}_{step}": n for step, n in zip(STEPS, counts, strict=True)}
                    result = {"variant": variant, "load": load_name, "round": round_,
                              "load_1m": os.getloadavg()[0],
                              **_serve(repos[variant], args.work, load, instances)}
                    print(_line(result), flush=True)
                    out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
