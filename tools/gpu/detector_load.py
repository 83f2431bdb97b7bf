"""Throughput of the GPU-detector proof: each detector alone at batch 1, 8 and 32, and whole ensembles at
concurrency 1..128 with every step's share of the time (Triton's statistics), so the bounding step shows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from generator.serving.contract import OUTPUTS
from tools.gpu.detector_checks import infer_tensor, input_size
from tools.gpu.gpu_http import InferError, Load, TritonHttp, drive

STEPS = ("preprocess", "detector", "nms")
BATCHES = (1, 8, 32)


def stats(client: TritonHttp, model: str) -> dict[str, int]:
    """Cumulative counters of one model: inferences, executions and nanoseconds by phase."""
    entry = client.json(f"/v2/models/{model}/stats")["model_stats"][0]
    phases = entry["inference_stats"]
    return {"inferences": int(entry["inference_count"]), "executions": int(entry["execution_count"]),
            "queue_ns": int(phases["queue"]["ns"]), "requests": int(phases["success"]["count"]),
            "infer_ns": int(phases["compute_infer"]["ns"]),
            "busy_ns": sum(int(phases[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))}


def delta(before: dict[str, int], after: dict[str, int], seconds: float, instances: int) -> dict[str, Any]:
    """What one step did in a window of ``seconds``: batch size, per-image time, utilisation of its instances."""
    d = {k: after[k] - before[k] for k in after}
    requests, executions = max(d["requests"], 1), max(d["executions"], 1)
    # Triton adds a batch's compute time to each of its requests: per execution, divide by requests per execution.
    per_execution = executions / requests
    exec_us = d["infer_ns"] / 1e3 / requests
    batch = d["inferences"] / executions
    return {"inferences": d["inferences"], "executions": d["executions"], "mean_batch": round(batch, 2),
            "exec_ms": round(exec_us / 1e3, 3), "infer_us_per_image": round(exec_us / max(batch, 1e-9), 1),
            "images_per_infer_s": round(batch / (exec_us / 1e6), 1) if exec_us else None,
            "queue_us_per_request": round(d["queue_ns"] / 1e3 / requests, 1),
            "utilisation": round(d["busy_ns"] * per_execution / 1e9 / (seconds * instances), 3)}


def threaded(call: Callable[[TritonHttp], int], url: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """``concurrency`` threads calling ``call`` (returns images) for ``seconds``: images/s and latencies."""
    latencies: list[float] = []
    images = [0]
    errors = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        client = TritonHttp(url)
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            try:
                count = call(client)
            except InferError:
                count, errors[0] = 0, errors[0] + 1
            with lock:
                latencies.append(time.perf_counter() - start)
                images[0] += count

    workers = [threading.Thread(target=loop) for _ in range(concurrency)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    latencies.sort()
    return {"client_images_per_s": round(images[0] / seconds, 1), "errors": errors[0],
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 2) if latencies else None}


def _batch_tensor(named: Mapping[str, bytes], size: tuple[int, int], batch: int) -> np.ndarray:
    """Real letterboxed scenes (the CPU preprocess), repeated up to ``batch`` images."""
    from generator.serving.batch import prepare_batch

    scenes = [data for name, data in named.items() if name.startswith("scene-")]
    images = prepare_batch(scenes, size).images
    return np.ascontiguousarray(np.resize(images, (batch, *images.shape[1:])))


def detector_throughput(url: str, named: Mapping[str, bytes], graphs: Mapping[str, str],
                        seconds: float) -> dict[str, Any]:
    """Each served graph's detector alone: batch-b requests one at a time (the batch is exactly b), images per
    second of compute_infer from Triton's statistics (host input: the client's tensor is copied to the GPU)."""
    client = TritonHttp(url)
    result: dict[str, Any] = {}
    tensors: dict[tuple[tuple[int, int], int], np.ndarray] = {}
    for label, ensemble in graphs.items():
        try:
            result.update(_graph_throughput(client, url, named, label, ensemble, seconds, tensors))
        except InferError as exc:  # a detector that did not load: the others still run
            result[label] = {"error": str(exc)}
    return result


def _graph_throughput(client: TritonHttp, url: str, named: Mapping[str, bytes], label: str, ensemble: str,
                      seconds: float, tensors: dict[tuple[tuple[int, int], int], np.ndarray]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    model = f"{ensemble}_detector"
    name = client.json(f"/v2/models/{model}")["inputs"][0]["name"]
    size = input_size(client, ensemble)
    for batch in BATCHES:
        tensor = tensors.get((size, batch))
        if tensor is None:
            tensor = tensors[(size, batch)] = _batch_tensor(named, size, batch)

        def call(c: TritonHttp, t: np.ndarray = tensor, m: str = model, n: str = name) -> int:
            infer_tensor(c, m, n, t)
            return len(t)

        threaded(call, url, 1, min(0.5, seconds))  # warm-up
        before, start = stats(client, model), time.perf_counter()
        wall = threaded(call, url, 1, seconds)
        window = time.perf_counter() - start  # the last request ends after ``seconds``
        result[f"{label} batch{batch}"] = {**wall, **delta(before, stats(client, model), window, 1)}
    return result


def end_to_end(url: str, ensembles: Sequence[str], seconds: float, levels: Sequence[int],
               instances: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """Whole ensembles, one 1280x720 JPEG per request, ``levels`` requests in flight; every step's statistics."""
    from loadtest.images import synthetic_images

    client = TritonHttp(url)
    requests = tuple((data,) for data in synthetic_images([(1280, 720)], per_size=32, seed=1280))
    result: dict[str, Any] = {}
    for ensemble in ensembles:
        try:
            result.update(_sweep(client, url, ensemble, requests, seconds, levels, instances[ensemble]))
        except InferError as exc:  # an ensemble that did not load: the others still run
            result[ensemble] = {"error": str(exc)}
    return result


def _sweep(client: TritonHttp, url: str, ensemble: str, requests: tuple[tuple[bytes, ...], ...], seconds: float,
           levels: Sequence[int], instances: Mapping[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    drive(Load(url, ensemble, requests[:4], OUTPUTS, 0.5, 1), 4)  # warm-up
    for concurrency in levels:
        before = {step: stats(client, f"{ensemble}_{step}") for step in STEPS}
        wall = drive(Load(url, ensemble, requests, OUTPUTS, seconds, 1), concurrency, processes=min(12, concurrency))
        # The clients' start-up is in elapsed_s too; the requests ran for about ``seconds``, the last ones longer.
        window = max(seconds, wall["elapsed_s"] - 0.2)
        steps = {step: delta(before[step], stats(client, f"{ensemble}_{step}"), window, instances[step])
                 for step in STEPS}
        bound = max(STEPS, key=lambda s: steps[s]["utilisation"])
        result[f"{ensemble} c{concurrency}"] = {**wall, "steps": steps, "busiest_step": bound}
    return result
