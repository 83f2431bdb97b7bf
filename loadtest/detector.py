"""The raw detector: the repository's detector ONNX timed in this process, the ceiling the ensemble is held to.

The raw ceiling is the user's exported detector on letterboxed tensors whenever the manifest points to it
unchanged (FP32 builds): what the served graph adds (normalisation prefix, class reduction) then counts as
ensemble cost instead of hiding in the ceiling. Precision builds time the served graph.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import LoadTestError
from .report import point_from_latencies

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OnnxFile:
    """An ONNX to load here, recorded in results by name and sha256 only (no machine paths)."""

    path: Path
    sha256: str

    def record(self) -> dict[str, str]:
        return {"name": self.path.name, "sha256": self.sha256}


@dataclass(frozen=True)
class ServedDetector:
    """The detector to time as the raw ceiling, the served step's topology, and a letterboxed input for it."""

    onnx: OnnxFile
    baseline: str  # which graph ``onnx`` is: the exported source or the served graph
    intra_op_threads: int
    instances: int
    max_batch: int
    input_dims: list[int]
    prepared: Any  # numpy [N, ...] in the detector's input dtype and layout
    image_size: tuple[int, int] = (640, 640)  # height, width the preprocess letterboxes to
    reduced_decode: bool = True  # as the repository's preprocess step decodes JPEGs


def _detector_config(repository: Path, model: str, step: str = "detector") -> Any:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    path = repository / f"{model}_{step}" / "config.pbtxt"
    if not path.is_file():
        raise LoadTestError(f"no {step} config at {path}: is {repository} a repository built for {model!r}?")
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _source_onnx(repository: Path) -> OnnxFile | None:
    """The exported ONNX the repository was built from, when it is here unchanged and served in FP32."""
    from generator.errors import GeneratorError
    from generator.repository.files import sha256_file
    from generator.repository.manifest import read_manifest

    try:
        manifest = read_manifest(repository)
    except GeneratorError:
        return None
    source = Path(manifest.source_onnx_path or "")
    if manifest.precision != "fp32" or not source.is_file():
        return None
    return OnnxFile(source, manifest.onnx_sha256) if sha256_file(source) == manifest.onnx_sha256 else None


def served_detector(repository: Path, model: str, images: list[bytes]) -> ServedDetector | str:
    """Read the detector step of ``repository``; a reason string when it does not run in this process."""
    import numpy as np
    from tritonclient.grpc import model_config_pb2

    from generator.repository.files import sha256_file
    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.runner import session_threads

    config = _detector_config(repository, model)
    params = {k: v.string_value for k, v in config.parameters.items()}
    if config.backend != "python" or "onnx_file" not in params:
        return f"detector is {config.platform or config.backend}, not ONNX Runtime in this process"
    (tensor,) = config.input
    fused = tensor.data_type == model_config_pb2.TYPE_STRING  # --fuse-preprocess: the step takes encoded images
    # A fused step's graph takes the uint8 letterboxed images of the size its preprocess half letterboxes to.
    dims = [int(params["input_height"]), int(params["input_width"]), 3] if fused else list(tensor.dims)
    channels_last = dims[-1] == 3
    height, width = (dims[0], dims[1]) if channels_last else (dims[1], dims[2])
    pre = config if fused else _detector_config(repository, model, "preprocess")
    reduced = pre.parameters["reduced_decode"].string_value != "false" if "reduced_decode" in pre.parameters else True
    prepared = prepare_batch(images, (height, width), reduced_decode=reduced).images  # uint8 BGR NHWC, as served
    served = repository / f"{model}_detector" / "1" / params["onnx_file"]
    onnx, baseline = OnnxFile(served, sha256_file(served)), "served graph"
    source = _source_onnx(repository)
    if source is not None:
        from generator.model.onnx_inspect import inspect_onnx

        onnx, baseline = source, "exported source ONNX (float NCHW input)"
        prepared = to_float_nchw(prepared, np.dtype(inspect_onnx(source.path, (height, width)).input.numpy_dtype))
    elif not fused and tensor.data_type != model_config_pb2.TYPE_UINT8:  # the detector wants float NCHW RGB /255
        dtype = np.float16 if tensor.data_type == model_config_pb2.TYPE_FP16 else np.float32
        prepared = to_float_nchw(prepared, dtype)
    instances = sum(group.count for group in config.instance_group) or 1
    return ServedDetector(
        onnx=onnx, baseline=baseline,
        intra_op_threads=session_threads(int(params.get("intra_op_threads", "0")), instances),
        instances=instances, max_batch=max(config.max_batch_size, 1), input_dims=dims, prepared=prepared,
        image_size=(height, width), reduced_decode=reduced,
    )


def _time_batch(runner: Any, inputs: Any, iterations: int) -> dict[str, Any]:
    for _ in range(2):
        runner.run(inputs)  # warm-up: first runs allocate and pick kernels
    times_ms: list[float] = []
    for _ in range(iterations):
        start = time.perf_counter()
        runner.run(inputs)
        times_ms.append((time.perf_counter() - start) * 1000.0)
    batch = len(inputs)
    point = point_from_latencies("onnxruntime", 1, times_ms, 0, sum(times_ms) / 1000.0, f"batch {batch}")
    mean = statistics.fmean(times_ms)
    return {"batch": batch, "iterations": iterations, "p50_ms": point.p50_ms, "p95_ms": point.p95_ms,
            "mean_ms": round(mean, 2), "images_per_s": round(batch * 1000.0 / mean, 2)}


def raw_detector(repository: Path, model: str, images: list[bytes], iterations: int,
                 batches: tuple[int, ...]) -> dict[str, Any]:
    """Time the detector in this process on letterboxed inputs, one session as ONNX Runtime's defaults make it.

    A thread per core this process may use (never ONNX Runtime's own 0, whose threads pin themselves to every core
    of the machine, outside ``taskset``) and spinning workers: the fastest a lone detector runs here.
    """
    import numpy as np

    from generator.serving.runner import OnnxRunner, usable_cores

    detector = served_detector(repository, model, images)
    if isinstance(detector, str):
        return {"skipped": detector}
    logger.info("(a) raw detector in-process: %s (%s)", detector.onnx.path.name, detector.baseline)
    threads = usable_cores()
    runner = OnnxRunner(str(detector.onnx.path), intra_op_threads=threads, spin_wait=True)
    prepared = detector.prepared
    return {
        "onnx": detector.onnx.record(), "baseline": detector.baseline, "intra_op_threads": threads, "spinning": True,
        "instances": detector.instances, "input": detector.input_dims, "static_batch": runner.static_batch,
        "batches": [_time_batch(runner, np.stack([prepared[i % len(prepared)] for i in range(batch)]), iterations)
                    for batch in batches if batch <= detector.max_batch],
    }
