"""INT8 Q/DQ placed by NVIDIA Model Optimizer's ONNX post-training quantization (``--int8-tool modelopt``).

Model Optimizer is the reference for the Q/DQ graphs TensorRT builds fastest: besides the convolutions it
quantizes residual Adds, pools and concats so TensorRT can fuse them. It runs on the CPU, but needs torch
(a CPU wheel: ~0.75 GB; PyPI's Linux default is the 5.3 GB CUDA build), so it is the optional extra
``int8-modelopt`` rather than the default. Its ``[onnx]`` extra is not used: it installs
onnxruntime-gpu into the same package folder as onnxruntime. The extra pins the modules
``modelopt.onnx.quantization`` imports instead.

It is called with FP32 as the high-precision type; :mod:`generator.builder.precision.int8` then converts
the float layers to FP16 except the head tail, which Model Optimizer's own conversion (by op type only)
would also turn to FP16.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from generator.builder.precision.errors import PrecisionError

EXTRA = "int8-modelopt"
_METHODS = {"minmax": "max", "entropy": "entropy"}  # with symmetric activations, max is minmax


def require_model_optimizer() -> None:
    """Say what to install when ``--int8-tool modelopt`` is asked for without the extra."""
    if importlib.util.find_spec("modelopt") is None or importlib.util.find_spec("torch") is None:
        raise PrecisionError(
            f"--int8-tool modelopt needs NVIDIA Model Optimizer and torch: pip install "
            f"'triton-detection-ensemble[{EXTRA}]' (a CPU torch wheel is enough), or use --int8-tool ort"
        )


def _ignore_tensorrt_stubs() -> None:
    """Keep Model Optimizer from taking ``tensorrt-stubs`` for TensorRT.

    The stubs leave an importable, empty ``tensorrt`` namespace package (CI installs them for mypy);
    Model Optimizer then believes TensorRT is present and calls ``trt.Logger`` to look for plugin layers.
    Without the real library there are no plugins to look for.
    """
    from generator.builder.tensorrt.availability import tensorrt_problem

    if importlib.util.find_spec("tensorrt") is not None and tensorrt_problem() is not None:
        from modelopt.onnx import trt_utils

        trt_utils.TRT_PYTHON_AVAILABLE = False


def quantize_with_model_optimizer(
    model: onnx.ModelProto, items: Sequence[np.ndarray], method: str, excluded: Sequence[str]
) -> onnx.ModelProto:
    """FP32 Q/DQ graph calibrated on ``items`` (preprocessed NCHW batches the model accepts).

    ``excluded`` node names become anchored regexes (Model Optimizer matches patterns with ``re.match``).
    Model Optimizer writes intermediates next to its input, so everything happens in a temporary folder.
    """
    from modelopt.onnx.quantization import quantize

    if method not in _METHODS:
        raise PrecisionError(f"Model Optimizer calibrates with {' or '.join(_METHODS)}, not {method}")
    _ignore_tensorrt_stubs()
    modelopt_logger = logging.getLogger("modelopt")
    level = modelopt_logger.level
    with tempfile.TemporaryDirectory(prefix="tde-modelopt-") as tmp:
        source, output = Path(tmp) / "model.onnx", Path(tmp) / "int8.onnx"
        onnx.save_model(model, source)
        try:
            quantize(
                onnx_path=str(source),
                quantize_mode="int8",
                calibration_data={model.graph.input[0].name: np.concatenate(list(items))},
                calibration_method=_METHODS[method],
                calibration_eps=["cpu"],
                high_precision_dtype="fp32",
                nodes_to_exclude=[re.escape(name) + "$" for name in excluded],
                output_path=str(output),
                log_level="WARNING",
            )
        except (ValueError, AssertionError, RuntimeError) as exc:
            raise PrecisionError(f"Model Optimizer INT8 quantization failed: {exc}") from exc
        finally:
            modelopt_logger.setLevel(level)
        return onnx.load_model(output)
