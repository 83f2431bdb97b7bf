"""The detector engine alone: a repository's served graph on ONNX Runtime, outside Triton, at fixed batch sizes.

What the served pipeline is held to. On a GPU repository (``--target embedded --device gpu``), with the CUDA
provider settings the served detector uses, four ways per batch size:

- ``engine_device``: an ONNX Runtime session with the input bound from GPU memory and the outputs left there, the
  GPU's own ceiling (the number a GPU preprocess + detector could reach with no copies at all);
- ``engine_host``: the same session fed host arrays, outputs back on the host (``session.run``);
- ``runner_host`` / ``runner_device``: the project's ``OnnxRunner`` exactly as the served detector step runs it
  (one session per batch bucket, the head copied back once), from host arrays (the CPU preprocess) and from GPU
  memory (the GPU preprocess). The served step's own busy time (Triton's statistics) minus these is what Triton
  and the Python backend add.

With the control images of ``provider_check.npz`` the provider's agreement with the CPU provider is reported too
(generator/serving/provider_check.py). A CPU repository gets ``engine_host`` and ``runner_host`` on the CPU
provider. Needs numpy and ONNX Runtime (and CuPy on the GPU): ``python -m loadtest engine`` runs itself in the
embedded server's stub environment, where the served detector's onnxruntime-gpu and CuPy are.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from generator.serving.cuda_provider import DEVICE_PARAMETER, CudaSettings, session_providers
from generator.serving.provider_check import CHECK_PARAMETER, agreement, load_control, per_image
from generator.serving.runner import OnnxRunner, batch_buckets, usable_cores

from .errors import LoadTestError

_PARAMETER = re.compile(r'key:\s*"([^"]*)"\s*value\s*\{\s*string_value:\s*"([^"]*)"\s*\}')
_DIMS = re.compile(r"input\s*\[\s*\{[^}]*?dims:\s*\[([^\]]*)\]", re.DOTALL)
_FUSED_INPUT = re.compile(r"input\s*\[\s*\{[^}]*?data_type:\s*TYPE_STRING", re.DOTALL)


def detector_config(repository: Path, model: str) -> tuple[Path, dict[str, str], list[int]]:
    """The served graph, the parameters and the input dims of ``<model>_detector`` (an embedded detector)."""
    folder = repository / f"{model}_detector"
    config = folder / "config.pbtxt"
    if not config.is_file():
        raise LoadTestError(f"no detector config at {config}: is {repository} a repository built for {model!r}?")
    text = config.read_text()
    parameters = dict(_PARAMETER.findall(text))
    if "onnx_file" not in parameters:
        raise LoadTestError(f"{config} is not an embedded (Python-backend) detector: time its graph with "
                            "the target's own tools")
    versions = sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise LoadTestError(f"{folder} holds no version folder")
    dims = _DIMS.search(text)
    if dims is None or _FUSED_INPUT.search(text):  # --fuse-preprocess: encoded images in; the graph's from the size
        return versions[-1] / parameters["onnx_file"], parameters, []
    return versions[-1] / parameters["onnx_file"], parameters, [int(d) for d in dims.group(1).split(",")]


def _input_batch(parameters: dict[str, str], dims: list[int], size: int, control: np.ndarray | None) -> np.ndarray:
    if control is not None:
        return np.ascontiguousarray(np.resize(control, (size, *control.shape[1:])))
    height, width = int(parameters.get("input_height", "640")), int(parameters.get("input_width", "640"))
    item = [d if d > 0 else s for d, s in zip(dims or [-1, -1, 3], [height, width, 3], strict=False)]
    return np.random.default_rng(0).integers(0, 256, (size, *item), dtype=np.uint8)


def _rate(run: Callable[[], Any], size: int, seconds: float, sync: Callable[[], None]) -> dict[str, float]:
    """Images per second and the median batch time of ``run`` repeated for ``seconds`` after three warm-ups."""
    for _ in range(3):
        run()
    sync()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 3:
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    return {"images_per_s": round(size * len(times) / sum(times), 1),
            "batch_ms_p50": round(statistics.median(times) * 1000, 3), "runs": len(times)}


def _raw_session(path: Path, cuda: CudaSettings | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = usable_cores()  # not 0: those threads would pin themselves outside taskset
    return ort.InferenceSession(str(path), options, providers=session_providers(cuda))


def _engine_device(session: Any, batch: np.ndarray, cuda: CudaSettings) -> tuple[Callable[[], Any], Callable[[], None]]:
    """A run with the input bound from GPU memory and the outputs left there."""
    import cupy

    with cupy.cuda.Device(cuda.device_id):
        device_batch = cupy.asarray(batch)
    binding = session.io_binding()
    binding.bind_input(session.get_inputs()[0].name, "cuda", cuda.device_id, batch.dtype.type, list(batch.shape),
                       device_batch.data.ptr)
    for output in session.get_outputs():
        binding.bind_output(output.name, "cuda", cuda.device_id)

    def run() -> None:
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()

    return run, cupy.cuda.runtime.deviceSynchronize


def _row(session: Any, runner: OnnxRunner, batch: np.ndarray, cuda: CudaSettings | None,
         seconds: float) -> dict[str, dict[str, float]]:
    """One batch size: the session from host arrays and the runner from host arrays; on the GPU both from GPU
    memory too."""
    name, size = session.get_inputs()[0].name, len(batch)

    def engine_host() -> Any:
        return session.run(None, {name: batch})

    def runner_host() -> Any:
        return runner.run(batch)

    def no_sync() -> None:  # the host calls return finished work
        pass

    row = {"engine_host": _rate(engine_host, size, seconds, no_sync),
           "runner_host": _rate(runner_host, size, seconds, no_sync)}
    if cuda is not None:
        import cupy

        run, sync = _engine_device(session, batch, cuda)
        row["engine_device"] = _rate(run, size, seconds, sync)
        with cupy.cuda.Device(cuda.device_id):
            on_device = cupy.asarray(batch)

        def runner_device() -> Any:
            return runner.run(on_device)

        row["runner_device"] = _rate(runner_device, size, seconds, sync)
    return row


def engine_rates(path: Path, parameters: dict[str, str], dims: list[int], batches: Sequence[int], seconds: float,
                 device_id: int = 0) -> dict[str, Any]:
    """Every way above at every batch size, and the provider's agreement on the control images."""
    gpu = parameters.get(DEVICE_PARAMETER) == "gpu"
    cuda = CudaSettings.from_parameters(parameters, device_id) if gpu else None
    check = path.parent / parameters.get(CHECK_PARAMETER, "provider_check.npz")
    control = load_control(check) if check.is_file() else None
    results: dict[str, Any] = {"graph": path.name, "provider": "CUDAExecutionProvider" if gpu else "CPUExecutionProvider",
                               "cuda_settings": cuda.parameters() if cuda else None, "batches": {}}
    runner = OnnxRunner(str(path), cuda=cuda, buckets=batch_buckets(max(batches)) if cuda else ())
    for size in batches:
        batch = _input_batch(parameters, dims, size, control.images if control else None)
        results["batches"][str(size)] = _row(_raw_session(path, cuda), runner, batch, cuda, seconds)
    if control is not None:
        score, total = agreement(control.reference, per_image(runner.run(control.images)[0], control))
        results["provider_agreement"] = {"f1": round(score, 4), "detections": total}
    return results
