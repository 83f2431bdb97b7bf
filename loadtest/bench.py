"""The benchmark harness: one run, one machine, three views of where a request's time goes.

(a) the raw detector in-process on already-letterboxed tensors (ONNX Runtime, the repository's own ONNX and
thread setting): the ceiling; (b) the whole ensemble through Triton over gRPC and HTTP, closed-loop at
several concurrencies and image sizes; (c) per-stage costs from Triton's metrics for every cell of (b).
A cross-check runs Locust and perf_analyzer at one concurrency so the three load tools can be compared.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LoadTestError, RunError
from .images import synthetic_images
from .metrics import snapshot, stage_deltas
from .report import LatencyPoint, point_from_latencies

OUTPUT_NAMES = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


@dataclass(frozen=True)
class Endpoints:
    grpc: str
    http: str
    metrics: str


@dataclass(frozen=True)
class BenchSettings:
    model: str = "yolo"
    protocols: tuple[str, ...] = ("grpc", "http")
    sizes: tuple[tuple[int, int], ...] = ((640, 480), (1280, 720))
    concurrency: tuple[int, ...] = (1, 2, 4)
    duration_s: float = 10.0
    warmup_requests: int = 2
    images_per_size: int = 4
    raw_iterations: int = 20
    raw_batches: tuple[int, ...] = (1, 4)
    timeout_s: float = 60.0
    crosscheck_concurrency: int | None = 2
    crosscheck_duration_s: float = 20.0
    extra: dict[str, Any] = field(default_factory=dict)


# ---- (a) raw detector ---------------------------------------------------------------------------------


def _detector_config(repository: Path, model: str) -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = repository / f"{model}_detector" / "config.pbtxt"
    if not path.is_file():
        raise LoadTestError(f"no detector config at {path}: is {repository} a repository built for {model!r}?")
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


@dataclass(frozen=True)
class ServedDetector:
    """The detector to time as the raw ceiling, the served step's topology, and a letterboxed input for it."""

    onnx: Path
    baseline: str  # which graph ``onnx`` is: the exported source or the served graph
    intra_op_threads: int
    instances: int
    max_batch: int
    input_dims: list[int]
    prepared: Any  # numpy [N, ...] in the detector's input dtype and layout


def _source_onnx(repository: Path) -> Path | None:
    """The exported ONNX the repository was built from, when it is here unchanged and served in FP32."""
    import hashlib

    manifest_path = repository / "manifest.json"
    if not manifest_path.is_file():
        return None
    manifest = json.loads(manifest_path.read_text())
    recorded = manifest.get("source_onnx") or {}
    source = Path(recorded.get("path") or "")
    if manifest.get("precision") != "fp32" or not source.is_file():
        return None
    return source if hashlib.sha256(source.read_bytes()).hexdigest() == recorded.get("sha256") else None


def served_detector(repository: Path, model: str, images: list[bytes]) -> ServedDetector | str:
    """Read the detector step of ``repository``; a reason string when it does not run in this process.

    The raw ceiling is the user's exported detector on letterboxed float tensors whenever the manifest
    points to it (FP32 builds): what the served graph adds (normalisation prefix, class reduction) is
    then part of the ensemble's cost, not hidden in the ceiling. Precision builds time the served graph.
    """
    import numpy as np
    from tritonclient.grpc import model_config_pb2

    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.runner import session_threads

    config = _detector_config(repository, model)
    params = {k: v.string_value for k, v in config.parameters.items()}
    if config.backend != "python" or "onnx_file" not in params:
        return f"detector is {config.platform or config.backend}, not ONNX Runtime in this process"
    (tensor,) = config.input
    dims = list(tensor.dims)
    channels_last = dims[-1] == 3
    height, width = (dims[0], dims[1]) if channels_last else (dims[1], dims[2])
    prepared = prepare_batch(images, (height, width)).images  # uint8 BGR NHWC, like the preprocess step
    onnx_path = repository / f"{model}_detector" / "1" / params["onnx_file"]
    baseline = "served graph"
    source = _source_onnx(repository)
    if source is not None:
        from generator.builder.onnx_inspect import inspect_onnx

        onnx_path, baseline = source, "exported source ONNX (float NCHW input)"
        prepared = to_float_nchw(prepared, np.dtype(inspect_onnx(source, (height, width)).input.numpy_dtype))
    elif tensor.data_type != model_config_pb2.TYPE_UINT8:  # the detector wants float NCHW RGB /255
        dtype = np.float16 if tensor.data_type == model_config_pb2.TYPE_FP16 else np.float32
        prepared = to_float_nchw(prepared, dtype)
    instances = sum(group.count for group in config.instance_group) or 1
    return ServedDetector(
        onnx=onnx_path,
        baseline=baseline,
        intra_op_threads=session_threads(int(params.get("intra_op_threads", "0")), instances),
        instances=instances,
        max_batch=max(config.max_batch_size, 1),
        input_dims=dims,
        prepared=prepared,
    )


def raw_detector(repository: Path, model: str, images: list[bytes], iterations: int,
                 batches: tuple[int, ...]) -> dict[str, Any]:
    """Time the served detector ONNX in this process on letterboxed inputs, as the detector step gets them."""
    import numpy as np

    from generator.serving.runner import OnnxRunner

    detector = served_detector(repository, model, images)
    if isinstance(detector, str):
        return {"skipped": detector}
    prepared = detector.prepared
    # ONNX Runtime's defaults (every core, spinning worker threads): the fastest a lone detector runs here,
    # and what the served step uses for a request that runs alone.
    runner = OnnxRunner(str(detector.onnx), intra_op_threads=0, spin_wait=True)
    results: dict[str, Any] = {"onnx": str(detector.onnx), "baseline": detector.baseline,
                               "intra_op_threads": 0, "spinning": True,
                               "instances": detector.instances, "input": detector.input_dims,
                               "static_batch": runner.static_batch, "batches": []}
    for batch in batches:
        if batch > detector.max_batch:
            continue
        inputs = np.stack([prepared[i % len(prepared)] for i in range(batch)])
        for _ in range(2):
            runner.run(inputs)  # warm-up: first runs allocate and pick kernels
        times_ms: list[float] = []
        for _ in range(iterations):
            start = time.perf_counter()
            runner.run(inputs)
            times_ms.append((time.perf_counter() - start) * 1000.0)
        point = point_from_latencies("onnxruntime", 1, times_ms, 0, sum(times_ms) / 1000.0, f"batch {batch}")
        results["batches"].append({
            "batch": batch, "iterations": iterations, "p50_ms": point.p50_ms, "p95_ms": point.p95_ms,
            "mean_ms": round(statistics.fmean(times_ms), 2),
            "images_per_s": round(batch * 1000.0 / statistics.fmean(times_ms), 2),
        })
    return results


# ---- (b) closed-loop ensemble ---------------------------------------------------------------------------


def client_factory(protocol: str, url: str, model: str, timeout_s: float) -> Callable[[], Callable[[bytes], None]]:
    """Return a function that makes one client (per thread) and returns its ``infer(image)``."""
    import numpy as np

    def make() -> Callable[[bytes], None]:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            grpc_client = grpcclient.InferenceServerClient(url)
            grpc_outputs = [grpcclient.InferRequestedOutput(n) for n in OUTPUT_NAMES]

            def infer_grpc(image: bytes) -> None:
                tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
                tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_))
                result = grpc_client.infer(model, [tensor], outputs=grpc_outputs, client_timeout=timeout_s)
                if result.as_numpy("num_detections") is None:
                    raise RunError("response without num_detections")

            return infer_grpc
        import tritonclient.http as httpclient

        http_client = httpclient.InferenceServerClient(url, connection_timeout=timeout_s, network_timeout=timeout_s)
        http_outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in OUTPUT_NAMES]

        def infer_http(image: bytes) -> None:
            tensor = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[image]], dtype=np.object_), binary_data=True)
            result = http_client.infer(model, [tensor], outputs=http_outputs)
            if result.as_numpy("num_detections") is None:
                raise RunError("response without num_detections")

        return infer_http

    return make


def closed_loop(make_client: Callable[[], Callable[[bytes], None]], images: list[bytes], concurrency: int,
                duration_s: float, warmup_requests: int,
                on_start: Callable[[], None] | None = None) -> tuple[list[float], int, float, list[str]]:
    """``concurrency`` threads, each with its own client, send back to back for ``duration_s``.

    Returns (latencies ms of successes, failures, measured seconds, distinct error messages). Warm-up
    requests happen before the clock starts; ``on_start`` runs once everyone is warm (e.g. a metrics scrape).
    """
    latencies: list[float] = []
    errors: list[str] = []
    failures = 0
    lock = threading.Lock()
    ready = threading.Barrier(concurrency + 1)
    window: dict[str, float] = {}

    def worker(index: int) -> None:
        nonlocal failures
        try:
            infer = make_client()
            for i in range(warmup_requests):
                infer(images[(index + i) % len(images)])
        except Exception as exc:  # noqa: BLE001 -- reported below; the barrier must still be reached
            with lock:
                errors.append(f"warm-up: {exc}")
            ready.wait()
            return
        ready.wait()
        i = index
        while time.perf_counter() < window["end"]:
            start = time.perf_counter()
            try:
                infer(images[i % len(images)])
                elapsed = (time.perf_counter() - start) * 1000.0
                with lock:
                    latencies.append(elapsed)
            except Exception as exc:  # noqa: BLE001 -- a failed request is a data point
                with lock:
                    failures += 1
                    if len(errors) < 5 and str(exc) not in errors:
                        errors.append(str(exc))
            i += 1

    window["end"] = float("inf")
    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    # Everyone is warm once the barrier trips; set the deadline just before releasing them.
    while ready.n_waiting < concurrency and any(t.is_alive() for t in threads):
        time.sleep(0.01)
    if on_start is not None:
        on_start()
    begin = time.perf_counter()
    window["end"] = begin + duration_s
    ready.wait()
    for thread in threads:
        thread.join()
    return latencies, failures, time.perf_counter() - begin, errors


def ensemble_cells(endpoints: Endpoints, settings: BenchSettings,
                   progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every protocol x size x concurrency cell: client latencies and Triton's per-stage deltas."""
    cells: list[dict[str, Any]] = []
    for width, height in settings.sizes:
        images = synthetic_images([(width, height)], per_size=settings.images_per_size)
        for protocol in settings.protocols:
            url = endpoints.grpc if protocol == "grpc" else endpoints.http
            make = client_factory(protocol, url, settings.model, settings.timeout_s)
            for concurrency in settings.concurrency:
                before: dict[str, Any] = {}

                def scrape_start(store: dict[str, Any] = before) -> None:
                    store["snapshot"] = snapshot(endpoints.metrics)  # warm-up runs counted first

                latencies, failures, elapsed, errors = closed_loop(
                    make, images, concurrency, settings.duration_s, settings.warmup_requests, scrape_start
                )
                stages = stage_deltas(before["snapshot"], snapshot(endpoints.metrics))
                label = f"{protocol} {width}x{height}"
                point = point_from_latencies("bench", concurrency, latencies, failures, elapsed, label)
                cells.append({
                    "protocol": protocol, "size": [width, height], "concurrency": concurrency,
                    "avg_image_bytes": round(sum(map(len, images)) / len(images)),
                    "point": point.to_dict(), "errors": errors,
                    "stages": {name: s.to_dict() for name, s in stages.items()},
                })
                progress(f"  {label} c={concurrency}: {point.requests} req, {point.throughput_rps:.2f} rps, "
                         f"p50 {point.p50_ms} ms, p95 {point.p95_ms} ms, failures {failures}")
    return cells


def triton_version(http_url: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2", timeout=5) as response:
            return str(json.load(response).get("version"))
    except (OSError, ValueError):
        return None


def point_of(cell: dict[str, Any]) -> LatencyPoint:
    data = {k: v for k, v in cell["point"].items() if k != "fail_ratio"}
    return LatencyPoint(**data)
