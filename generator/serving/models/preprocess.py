"""Triton model: decode, validate and letterbox encoded images, one batch for all queued requests."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from ensemble_common import failed, parameters
from ensemble_pipeline.batch import prepare_batch, to_float_nchw
from ensemble_pipeline.contract import IMAGE, LETTERBOX, PREPROCESSED
from ensemble_pipeline.images import ImageLimits

# Triton runs several models side by side; OpenCV's own thread pool would oversubscribe the cores.
cv2.setNumThreads(1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        self.target = (int(params["input_height"]), int(params["input_width"]))
        self.limits = ImageLimits(
            max_bytes=int(params["max_image_bytes"]),
            max_pixels=int(params["max_image_pixels"]),
            max_side=int(params["max_image_side"]),
        )
        self.reduced_decode = params["reduced_decode"] == "true"
        # uint8: letterboxed BGR NHWC, normalised inside the detector graph; otherwise float NCHW RGB /255.
        self.output_dtype = np.dtype(params["output_dtype"])

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            return self._execute(requests)
        except Exception as exc:  # noqa: BLE001 -- the client must never see a traceback
            return failed(requests, "preprocess", exc)

    def _execute(self, requests: list[Any]) -> list[Any]:
        encoded: list[bytes] = []
        bounds: list[tuple[int, int]] = []
        for request in requests:
            items = pb_utils.get_input_tensor_by_name(request, IMAGE).as_numpy().reshape(-1)
            bounds.append((len(encoded), len(encoded) + len(items)))
            encoded.extend(bytes(item) for item in items)
        batch = prepare_batch(encoded, self.target, self.limits, self.reduced_decode)
        slot_of = {position: slot for slot, position in enumerate(batch.index)}

        responses = []
        for start, stop in bounds:
            bad = [p for p in range(start, stop) if p in batch.errors]
            if bad:
                where = f"image {bad[0] - start}: " if stop - start > 1 else ""
                error = pb_utils.TritonError(
                    f"invalid image: {where}{batch.errors[bad[0]]}", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            slots = slice(slot_of[start], slot_of[stop - 1] + 1) if stop > start else slice(0, 0)
            images = batch.images[slots]
            if self.output_dtype != np.uint8:
                images = to_float_nchw(images, self.output_dtype)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(PREPROCESSED, np.ascontiguousarray(images)),
                pb_utils.Tensor(LETTERBOX, np.ascontiguousarray(batch.letterbox[slots])),
            ]))
        return responses
