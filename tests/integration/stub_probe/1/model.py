"""Answer a BYTES request with the stub's numpy, OpenCV and ONNX Runtime versions and its sys.prefix.

A BYTES input is what kills the Triton 2.51 stub under numpy 2; the BYTES output comes back through
pb_utils.Tensor, which arrives empty there.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import cv2
import numpy as np
import onnxruntime
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            received = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            report = {"numpy": np.__version__, "cv2": cv2.__version__, "onnxruntime": onnxruntime.__version__,
                      "prefix": sys.prefix, "received": [bytes(item).decode() for item in received]}
            out = np.array([json.dumps(report).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
