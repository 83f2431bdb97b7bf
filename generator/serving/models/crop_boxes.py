"""Triton model (two-stage builds): cut every queued image's first kept boxes out of the full-resolution source
image as Ultralytics' ``save_one_box`` does, each resized and centre-cropped for the classifier step.

The image is decoded again here, at full resolution: the preprocess step may have decoded a large JPEG at a
reduced size, and it sends only the letterboxed input on. Its header checks already passed (a refused image never
reaches this step); the same limits apply to this decode.
"""

from __future__ import annotations

import os
from typing import Any

from ensemble_pipeline.contract import (
    BOXES,
    CROP_COUNT,
    CROPS,
    IMAGE,
    NUM_DETECTIONS,
    OPENCV_PIXEL_LIMIT,
    OPENCV_PIXEL_LIMIT_ENV,
)

os.environ.setdefault(OPENCV_PIXEL_LIMIT_ENV, str(OPENCV_PIXEL_LIMIT))  # before cv2 loads, as the preprocess

import cv2
import numpy as np
import triton_python_backend_utils as pb_utils
from ensemble_common import failed, parameters
from ensemble_pipeline.images import ImageLimits, decode_image
from ensemble_pipeline.two_stage import crop_boxes

cv2.setNumThreads(1)  # Triton runs the steps side by side: no OpenCV pool on top


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        self.size = int(params["classifier_size"])
        self.max_boxes = int(params["classify_boxes"])
        self.limits = ImageLimits(max_bytes=int(params["max_image_bytes"]), max_pixels=int(params["max_image_pixels"]),
                                  max_side=int(params["max_image_side"]), max_jpeg_scans=int(params["max_jpeg_scans"]))

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            return [self._one(request) for request in requests]
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "crop", exc)

    def _one(self, request: Any) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, IMAGE).as_numpy().reshape(-1)
        counts = pb_utils.get_input_tensor_by_name(request, NUM_DETECTIONS).as_numpy().reshape(-1)
        boxes = pb_utils.get_input_tensor_by_name(request, BOXES).as_numpy()
        crops = np.zeros((len(images), self.max_boxes, self.size, self.size, 3), dtype=np.uint8)
        kept = np.zeros((len(images), 1), dtype=np.int32)
        for item, (data, count) in enumerate(zip(images, counts, strict=True)):
            if count <= 0:  # nothing to classify: no decode either
                continue
            image, _ = decode_image(bytes(data), self.limits)
            batch = crop_boxes(image, boxes[item, :int(count)], self.size, self.max_boxes)
            crops[item], kept[item, 0] = batch.crops, batch.count
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(CROPS, crops),
                                                          pb_utils.Tensor(CROP_COUNT, kept)])
