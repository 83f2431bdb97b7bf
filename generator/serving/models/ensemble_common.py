"""Helpers shared by the generated Python-backend models (copied into each model's version folder)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


def parameters(args: dict[str, str]) -> dict[str, str]:
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


def stack_inputs(requests: list[Any], name: str) -> tuple[np.ndarray, list[int]]:
    """Concatenate input ``name`` of every request along the batch axis; return it and each request's size."""
    arrays = [pb_utils.get_input_tensor_by_name(r, name).as_numpy() for r in requests]
    sizes = [len(a) for a in arrays]
    return (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)), sizes


def split_responses(outputs: dict[str, np.ndarray], sizes: list[int]) -> list[Any]:
    """One response per request, each with its slice of every output."""
    responses = []
    start = 0
    for size in sizes:
        tensors = [pb_utils.Tensor(name, value[start : start + size]) for name, value in outputs.items()]
        responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        start += size
    return responses


def failed(requests: list[Any], step: str, exc: BaseException) -> list[Any]:
    """Log the real cause server-side; tell the client only that the step failed."""
    pb_utils.Logger.log_error(f"{step} failed: {type(exc).__name__}: {exc}")
    error = pb_utils.TritonError(f"{step} failed; see the server log")
    return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
