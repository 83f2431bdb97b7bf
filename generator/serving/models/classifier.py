"""Triton model (two-stage builds): the classifier ONNX on ONNX Runtime over the crops of every queued image.

The crops of all requests the batcher queued go through one run (only the real ones: a request's padding rows
past its CROP_COUNT are never classified), then each crop's top-k classes; rows past the count stay zero.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from ensemble_common import failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.contract import BOX_CLASSES, BOX_SCORES, CROP_COUNT, CROPS, TOP_CLASSES, TOP_SCORES
from ensemble_pipeline.runner import OnnxRunner, step_session_threads
from ensemble_pipeline.tasks import top_classes


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        config = json.loads(args["model_config"])
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        self.runner = OnnxRunner(str(path), step_session_threads(config, params))
        self.top_k = int(params["top_k"])

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            crops, sizes = stack_inputs(requests, CROPS)
            counts = stack_inputs(requests, CROP_COUNT)[0].reshape(-1)
            rows = crops.shape[1]
            classes = np.zeros((len(crops), rows, self.top_k), dtype=np.int32)
            scores = np.zeros((len(crops), rows, self.top_k), dtype=np.float32)
            real = np.arange(rows)[None, :] < counts[:, None]  # [images, rows]
            if real.any():
                (probabilities,) = self.runner.run(np.ascontiguousarray(crops[real]))[:1]
                best = top_classes(probabilities, self.top_k)
                classes[real], scores[real] = best[TOP_CLASSES], best[TOP_SCORES]
            return split_responses({BOX_CLASSES: classes, BOX_SCORES: scores}, sizes)
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "classifier", exc)
