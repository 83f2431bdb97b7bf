"""Issue 35 probe: does spinning only while a run lasts give the served detector the spinning session's speed?

The decomposition (docs/PERFORMANCE.md, "Where the time goes, against Ultralytics' predict") puts the served
pipeline's whole one-stream deficit in the detector session, whose intra-op workers sleep between operators
(spinning off: two spinning instances of every core each cost 1.4-8.5x the CPU per image, issue 27). ONNX Runtime's
``session.force_spinning_stop`` stops the workers spinning as soon as the last concurrent ``Run`` returns. This
probe runs, without Triton, what one detector instance per stream does between requests (reduced JPEG decode and
letterbox, the session's run, a small post-processing pass) with two sessions of one thread per usable core, in
paired rounds with the order alternating, for three settings: ``sleep`` (the served default), ``spin`` (ONNX
Runtime's default) and ``spin-stop`` (spinning plus ``session.force_spinning_stop``).

    taskset -c 0-3 python3 tools/gpu/spin_probe.py --onnx yolov8n.onnx --out probe-4c.json

Prints one line per setting and stream count (p50 ms, images/s, process CPU ms per image; medians over rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort

SETTINGS = {"sleep": {"session.intra_op.allow_spinning": "0"},
            "spin": {"session.intra_op.allow_spinning": "1"},
            "spin-stop": {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"}}


def _session(path: str, entries: dict[str, str]) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = len(os.sched_getaffinity(0))
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    image = cv2.GaussianBlur(rng.integers(0, 255, (720, 1280, 3), dtype=np.uint8), (31, 31), 0)
    return bytes(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])[1])


def _frame(session: ort.InferenceSession, data: bytes, name: str) -> None:
    """One request's CPU work: reduced decode, letterbox to 640, the run, a post-processing pass."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_COLOR_2)
    if image is None:
        raise ValueError("the probe's JPEG did not decode")
    scale = 640 / max(image.shape[:2])
    resized = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)))
    boxed = cv2.copyMakeBorder(resized, 0, 640 - resized.shape[0], 0, 640 - resized.shape[1], cv2.BORDER_CONSTANT)
    tensor = np.ascontiguousarray(boxed[None, :, :, ::-1].transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
    (out,) = session.run(None, {name: tensor})[:1]
    scores = out[0, 4:].max(axis=0)
    np.argsort(-scores[scores > 0.25])


def _window(sessions: list[ort.InferenceSession], jpegs: list[bytes], streams: int, seconds: float) -> dict[str, float]:
    name = sessions[0].get_inputs()[0].name
    latencies: list[float] = []
    lock = threading.Lock()

    def loop(index: int) -> None:
        i = index
        while True:  # at least one frame a stream, however short the window
            start = time.perf_counter()
            _frame(sessions[index], jpegs[i % len(jpegs)], name)
            with lock:
                latencies.append((time.perf_counter() - start) * 1000)
            i += 1
            if time.perf_counter() >= deadline:
                break

    for s in sessions[:streams]:
        _frame(s, jpegs[0], name)  # warm
    cpu, began = time.process_time(), time.perf_counter()
    deadline = began + seconds  # after the warm-up, which would otherwise eat a short window
    threads = [threading.Thread(target=loop, args=(n,)) for n in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"p50_ms": round(statistics.median(latencies), 2), "rps": round(len(latencies) / elapsed, 2),
            "cpu_ms_per_image": round(cpu * 1000 / len(latencies), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--streams", default="1,2")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    jpegs = [_jpeg(seed) for seed in range(4)]
    sessions = {name: [_session(args.onnx, entries) for _ in range(2)] for name, entries in SETTINGS.items()}
    counts = [int(n) for n in args.streams.split(",")]
    rounds: list[dict[str, Any]] = []
    for index in range(args.rounds):
        order = list(SETTINGS) if index % 2 == 0 else list(SETTINGS)[::-1]
        rounds.append({name: {str(n): _window(sessions[name], jpegs, n, args.window) for n in counts} for name in order})
    cores = len(os.sched_getaffinity(0))
    summary = {name: {str(n): {key: statistics.median(r[name][str(n)][key] for r in rounds)
                               for key in ("p50_ms", "rps", "cpu_ms_per_image")} for n in counts} for name in SETTINGS}
    record = {"cores": cores, "onnxruntime": ort.__version__, "rounds": rounds, "summary": summary}
    Path(args.out).write_text(json.dumps(record, indent=1))
    for name in SETTINGS:
        for n in counts:
            cell = summary[name][str(n)]
            print(f"{cores} cores | {name} | {n} streams | p50 {cell['p50_ms']} ms | {cell['rps']} img/s | "
                  f"CPU {cell['cpu_ms_per_image']} ms/img")
    return 0


if __name__ == "__main__":
    sys.exit(main())
