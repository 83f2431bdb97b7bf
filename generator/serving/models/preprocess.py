"""Triton model: decode, validate and letterbox encoded images, one batch for all queued requests.

With the ``preprocess_device`` parameter "gpu" (``--preprocess-device gpu``, instances of KIND_GPU) JPEGs are
decoded in batches by nvImageCodec and letterboxed by CuPy on this instance's GPU (``ensemble_pipeline.gpu``), and
the PREPROCESSED output leaves as a device tensor through DLPack, or, with ``gpu_handoff`` "host"
(``--gpu-handoff host``), the batch is copied to host memory once and leaves as host tensors; every check,
fallback and message is the CPU path's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ensemble_pipeline.contract import (
    IMAGE,
    LETTERBOX,
    OPENCV_PIXEL_LIMIT,
    OPENCV_PIXEL_LIMIT_ENV,
    PREPROCESSED,
)

# OpenCV reads its decode limit once, when cv2 loads: set the backstop before anything imports it. A value
# the server's environment already carries (generator serve, the deploy images) wins.
os.environ.setdefault(OPENCV_PIXEL_LIMIT_ENV, str(OPENCV_PIXEL_LIMIT))

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from ensemble_common import StepMetrics, counted, failed, parameters
from ensemble_pipeline.batch import prepare_batch, to_float_nchw
from ensemble_pipeline.crop import center_crop_into
from ensemble_pipeline.images import DecodeBudget, ImageLimits, measure_decode_speed
from ensemble_pipeline.letterbox import letterbox_into
from ensemble_pipeline.phases import GPU_PREPROCESS_PHASES, PREPROCESS_PHASES, Lap, PhaseClock, phase_series
from ensemble_pipeline.telemetry import preprocess_series, rejection_counts

# Triton runs several models side by side; OpenCV's own thread pool would oversubscribe the cores.
cv2.setNumThreads(1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.configure(args)
        self.telemetry = StepMetrics(args, preprocess_series() + phase_series(self.phases))

    def configure(self, args: dict[str, str]) -> None:
        """Everything but the telemetry, which a fused step (detector_fused.py) shares with its detector."""
        params = parameters(args)
        self.target = (int(params["input_height"]), int(params["input_width"]))
        self.limits = ImageLimits(
            max_bytes=int(params["max_image_bytes"]),
            max_pixels=int(params["max_image_pixels"]),
            max_side=int(params["max_image_side"]),
            max_jpeg_scans=int(params["max_jpeg_scans"]),
            decode_budget=self._decode_budget(float(params["max_decode_ms"])),
        )
        self.reduced_decode = params["reduced_decode"] == "true"
        # A classifier's input is the centre crop of the image resized as Ultralytics' classify predict does.
        self.place = center_crop_into if params.get("resize", "letterbox") == "center_crop" else letterbox_into
        # uint8: letterboxed BGR NHWC, normalised inside the detector graph; otherwise float NCHW RGB /255.
        self.output_dtype = np.dtype(params["output_dtype"])
        self.prepare: Callable[[list[bytes], Lap], Any] = self._prepare_on_cpu
        self.to_float: Callable[[Any, np.dtype], Any] = to_float_nchw
        self.images_tensor: Callable[[str, Any], Any] = self._host_tensor
        self.to_host: Callable[[Any], Any] | None = None
        on_gpu = params.get("preprocess_device", "cpu") == "gpu"
        self.phases = GPU_PREPROCESS_PHASES if on_gpu else PREPROCESS_PHASES
        if on_gpu:
            from ensemble_pipeline.gpu import GpuPreprocessor, batch_to_host
            from ensemble_pipeline.gpu import to_float_nchw as to_float_on_gpu

            gpu = GpuPreprocessor.on_device(int(args["model_instance_device_id"]), self.target, self.limits,
                                            self.reduced_decode)
            self.prepare = gpu.prepare_batch
            if params.get("gpu_handoff", "device") == "host":  # one copy of the batch; the rest is the CPU path's
                self.to_host = batch_to_host
            else:
                self.to_float = to_float_on_gpu
                self.images_tensor = pb_utils.Tensor.from_dlpack  # stays on the GPU: the detector reads it there

    def _prepare_on_cpu(self, encoded: list[bytes], lap: Lap) -> Any:
        return prepare_batch(encoded, self.target, self.limits, self.reduced_decode, self.place, lap)

    @staticmethod
    def _host_tensor(name: str, array: np.ndarray) -> Any:
        return pb_utils.Tensor(name, np.ascontiguousarray(array))

    @staticmethod
    def _decode_budget(max_ms: float) -> DecodeBudget | None:
        """The budget in this machine's decode speed, measured here where the decoding happens."""
        if max_ms <= 0:
            return None
        speed = measure_decode_speed()
        pb_utils.Logger.log_info(f"preprocess: decode budget {max_ms:g} ms per image; a baseline JPEG decodes "
                                 f"at {speed:.1f} ms per megapixel here")
        return DecodeBudget(max_ms, speed)

    def finalize(self) -> None:
        self.telemetry.close()

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            return self._execute(requests)
        except Exception as exc:  # noqa: BLE001 -- the client must never see a traceback
            return failed(requests, "preprocess", exc)

    def _execute(self, requests: list[Any]) -> list[Any]:
        clock = PhaseClock()
        batch, bounds = self.prepare_requests(requests, clock)
        slot_of = {position: slot for slot, position in enumerate(batch.index)}
        responses = []
        for start, stop in bounds:
            error = request_error(batch, start, stop)
            if error is not None:
                responses.append(error)
                continue
            slots = request_slots(slot_of, start, stop)
            images = batch.images[slots]
            if self.output_dtype != np.uint8:
                images = self.to_float(images, self.output_dtype)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                self.images_tensor(PREPROCESSED, images),
                pb_utils.Tensor(LETTERBOX, np.ascontiguousarray(batch.letterbox[slots])),
            ]))
        clock.lap("responses")
        self.telemetry.add(clock.counts())
        return responses

    def prepare_requests(self, requests: list[Any], clock: PhaseClock) -> tuple[Any, list[tuple[int, int]]]:
        """Every request's images decoded and letterboxed as one batch (rejections counted), and each request's
        (start, stop) among the batch's input positions; ``clock`` ends the phases up to the responses."""
        encoded: list[bytes] = []
        bounds: list[tuple[int, int]] = []
        for request in requests:
            items = pb_utils.get_input_tensor_by_name(request, IMAGE).as_numpy().reshape(-1)
            bounds.append((len(encoded), len(encoded) + len(items)))
            encoded.extend(bytes(item) for item in items)
        clock.lap("inputs")
        batch = self.prepare(encoded, clock.lap)
        if self.to_host is not None:
            batch = self.to_host(batch)
            clock.lap("to_host")
        keep = counted(requests, [stop - start for start, stop in bounds])
        if keep is None:
            self.telemetry.add(rejection_counts(len(encoded), batch.reasons.values()))
        else:
            reasons = [reason for position, reason in batch.reasons.items() if keep[position]]
            self.telemetry.add(rejection_counts(int(keep.sum()), reasons))
        return batch, bounds


def request_error(batch: Any, start: int, stop: int) -> Any | None:
    """The error response of the request whose images are input positions [start, stop), if one was rejected
    (the first bad image's message); None when all of them were prepared."""
    bad = [p for p in range(start, stop) if p in batch.errors]
    if not bad:
        return None
    where = f"image {bad[0] - start}: " if stop - start > 1 else ""
    error = pb_utils.TritonError(f"invalid image: {where}{batch.errors[bad[0]]}", pb_utils.TritonError.INVALID_ARG)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


def request_slots(slot_of: dict[int, int], start: int, stop: int) -> slice:
    """The batch slots of a request whose images (input positions [start, stop)) were all prepared."""
    return slice(slot_of[start], slot_of[stop - 1] + 1) if stop > start else slice(0, 0)
