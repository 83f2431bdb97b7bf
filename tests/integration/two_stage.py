"""Helpers of the two-stage tests: one image through a served two-stage ensemble, the recorded reference."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from generator.serving.contract import IMAGE, TWO_STAGE_OUTPUTS
from tests.fixtures.ultralytics.two_stage import REFERENCE


def infer(url: str, model: str, image: bytes) -> dict[str, np.ndarray]:
    """Every two-stage output of one image (its batch item)."""
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput(IMAGE, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=object).reshape(1, 1))
    result = client.infer(model, [tensor],
                          outputs=[grpcclient.InferRequestedOutput(name) for name in TWO_STAGE_OUTPUTS])
    return {name: result.as_numpy(name)[0] for name in TWO_STAGE_OUTPUTS}


def reference() -> dict[str, Any]:
    return json.loads(REFERENCE.read_text())
