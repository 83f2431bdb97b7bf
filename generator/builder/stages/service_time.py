"""How long one batch takes through the pipeline on the build machine: what the queue policy is sized from.

The build runs the serving code itself on a batch of ``--max-batch`` synthetic camera frames: the
preprocess step's decode and letterbox, the served detector graph on ONNX Runtime with the threads one
embedded detector instance gets, and the NMS step. Each step is timed on its own and the median of a few
runs is kept. When the detector runs on a GPU (``--target tensorrt``, ``--device gpu``) it runs beside the
Python steps, and the build machine need not have that GPU, so only the preprocess step (the slowest of them)
is timed; ``--service-ms`` replaces the measurement (e.g. with a number from a load test on the serving
machine).
"""

from __future__ import annotations

import functools
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from generator.builder.spec.options import BuildOptions
from generator.model.onnx_inspect import DetectorInfo
from generator.repository.admission_record import ServiceTime

logger = logging.getLogger(__name__)

FRAME = (1280, 720)  # width, height of the measured frames: a common camera frame
FRAME_TEXT = f"{FRAME[0]}x{FRAME[1]} JPEG"
RUNS = 3


def _median_ms(run: Callable[[], object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


@functools.lru_cache(maxsize=1)
def _frame() -> bytes:
    """A synthetic scene with sensor-like noise: 350 KB at quality 90, like a real camera frame of this size
    (the clean scene is 150 KB and decodes twice as fast)."""
    from generator.synthetic import encode, make_scene

    rng = np.random.default_rng(0)
    image = make_scene(rng, *FRAME).image
    noisy = np.clip(image + rng.normal(0.0, 12.0, image.shape), 0, 255).astype(np.uint8)
    return encode(noisy)


def _time_steps(served: onnx.ModelProto, info: DetectorInfo, options: BuildOptions,
                frames: list[bytes]) -> dict[str, float]:
    from generator.serving.batch import prepare_batch, to_float_nchw
    from generator.serving.crop import center_crop_into
    from generator.serving.letterbox import letterbox_into
    from generator.serving.runner import OnnxRunner, session_threads
    from generator.serving.tasks import HeadSpec, postprocess_task, top_classes

    classify = info.task == "classify"  # the centre crop at full decode and the top-k, as the steps serve it

    def preprocess() -> tuple[np.ndarray, np.ndarray]:
        batch = prepare_batch(frames, info.image_size, reduced_decode=options.reduced_decode and not classify,
                              place=center_crop_into if classify else letterbox_into)
        if options.normalise_in == "graph":
            return batch.images, batch.letterbox
        return to_float_nchw(batch.images, np.dtype(info.input.numpy_dtype)), batch.letterbox

    images, letterbox = preprocess()
    steps = {"preprocess": _median_ms(preprocess)}
    if options.detector_device == "gpu":
        return steps  # the detector runs on the GPU beside it; NMS costs a small fraction of the decode
    with tempfile.TemporaryDirectory(prefix="tde-service-") as tmp:
        path = Path(tmp) / "served.onnx"
        onnx.save(served, str(path))
        runner = OnnxRunner(str(path), session_threads(options.detector_thread_setting, options.detector_instances),
                            # alone: the sleeping session, the one that serves under load
                            spin_wait=options.detector_spin_setting in ("true", "run"),
                            spin_stop=options.detector_spin_setting == "run")
        outputs = runner.run(images)  # also the warm-up run
        raw = outputs[runner.output_names.index(info.output.name)]
        protos = outputs[runner.output_names.index(info.protos.name)] if info.protos else None
        steps["detector"] = _median_ms(lambda: runner.run(images))
    if classify:
        steps["nms"] = _median_ms(lambda: top_classes(raw, options.top_k))
        return steps
    spec = HeadSpec(info.layout, info.num_classes, info.kpt_shape)
    steps["nms"] = _median_ms(lambda: postprocess_task(raw, spec, letterbox, options.conf_threshold,
                                                       options.iou_threshold, options.max_detections, protos))
    return steps


def measure_service_time(served: onnx.ModelProto, info: DetectorInfo, options: BuildOptions) -> ServiceTime:
    """Time the serving code on one batch (or take ``--service-ms``); ``info`` describes the served graph."""
    if options.service_ms is not None:
        return ServiceTime(options.max_batch, options.service_ms, "--service-ms", frame=FRAME_TEXT)
    import cv2

    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)  # as the preprocess model runs
    try:
        steps = _time_steps(served, info, options, [_frame()] * options.max_batch)
    finally:
        cv2.setNumThreads(threads)
    source = "measured on the build machine"
    if options.detector_device == "gpu":
        source += " (preprocess only: the detector runs on the GPU beside it)"
    service = ServiceTime(options.max_batch, sum(steps.values()), source, steps, FRAME_TEXT)
    logger.info("Service time of a batch of %d: %.1f ms (%s)", options.max_batch, service.batch_ms,
                ", ".join(f"{step} {ms:.1f} ms" for step, ms in steps.items()))
    return service
