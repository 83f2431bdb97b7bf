"""INT8 Q/DQ placed by NVIDIA Model Optimizer's ONNX post-training quantization (``--int8-tool modelopt``).

Model Optimizer is the reference for the Q/DQ graphs TensorRT builds fastest: besides the convolutions it
quantizes residual Adds, pools and concats so TensorRT can fuse them. It runs on the CPU, but needs torch
(a CPU wheel: ~0.75 GB; PyPI's Linux default is the 5.3 GB CUDA build), so it is the optional extra
``int8-modelopt`` rather than the default. Its ``[onnx]`` extra is not used: it installs
onnxruntime-gpu into the same package folder as onnxruntime. The extra pins the modules
``modelopt.onnx.quantization`` imports instead.

It is called with FP32 as the high-precision type; :mod:`generator.builder.stages.precision.int8` then converts
the float layers to FP16 except the head tail, which Model Optimizer's own conversion (by op type only)
would also turn to FP16.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from generator.builder.stages.precision.errors import PrecisionError

logger = logging.getLogger(__name__)
EXTRA = "int8-modelopt"
TIMEOUT_S = 3600.0
_SOURCE, _CALIBRATION, _REQUEST, _OUTPUT = "model.onnx", "calibration.npy", "request.json", "int8.onnx"
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
    from generator.repository.host import tensorrt_problem

    if importlib.util.find_spec("tensorrt") is not None and tensorrt_problem() is not None:
        from modelopt.onnx import trt_utils

        trt_utils.TRT_PYTHON_AVAILABLE = False


def quantize_with_model_optimizer(
    model: onnx.ModelProto, items: Sequence[np.ndarray], method: str, excluded: Sequence[str]
) -> onnx.ModelProto:
    """FP32 Q/DQ graph calibrated on ``items`` (preprocessed NCHW batches the model accepts).

    Runs in a child process: Model Optimizer patches ONNX Runtime's calibrators process-wide (its
    ``ort_patching``), after which a plain ``quantize_static`` in the same process fails. ``excluded`` node
    names become anchored regexes (Model Optimizer matches patterns with ``re.match``).
    """
    if method not in _METHODS:
        raise PrecisionError(f"Model Optimizer calibrates with {' or '.join(_METHODS)}, not {method}")
    with tempfile.TemporaryDirectory(prefix="tde-modelopt-") as tmp:
        work = Path(tmp)
        onnx.save_model(model, work / _SOURCE)
        np.save(work / _CALIBRATION, np.concatenate(list(items)))
        request = {"input": model.graph.input[0].name, "method": _METHODS[method],
                   "exclude": [re.escape(name) + "$" for name in excluded]}
        (work / _REQUEST).write_text(json.dumps(request))
        try:
            completed = subprocess.run([sys.executable, "-m", __name__, str(work)], capture_output=True, text=True,
                                       timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired as exc:
            raise PrecisionError(f"Model Optimizer did not finish within {TIMEOUT_S} s") from exc
        logger.debug("Model Optimizer output:\n%s", completed.stderr)
        if completed.returncode != 0:
            raise PrecisionError(f"Model Optimizer INT8 quantization failed: {_exception_text(completed)}")
        return onnx.load_model(work / _OUTPUT)


def _exception_text(completed: subprocess.CompletedProcess[str]) -> str:
    """The child's final exception (type and message, possibly over several lines) as one line.

    It follows the last traceback frame (``  File ...``) and that frame's source lines (indented 4+).
    """
    lines = [line for line in completed.stderr.rstrip().splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    start = frames[-1] + 1 if frames else max(len(lines) - 1, 0)
    while start < len(lines) and lines[start].startswith("    "):
        start += 1
    text = " ".join(line.strip() for line in lines[start:]) or f"exit status {completed.returncode}"
    return text if len(text) <= 400 else text[:397] + "..."


def _quantize_in_child(work: Path) -> None:
    """The child process: Model Optimizer's ``quantize`` on the files the parent wrote into ``work``."""
    _ignore_tensorrt_stubs()
    from modelopt.onnx.quantization import quantize

    request = json.loads((work / _REQUEST).read_text())
    quantize(
        onnx_path=str(work / _SOURCE),  # its intermediates land next to this file
        quantize_mode="int8",
        calibration_data={request["input"]: np.load(work / _CALIBRATION)},
        calibration_method=request["method"],
        calibration_eps=["cpu"],
        high_precision_dtype="fp32",
        nodes_to_exclude=request["exclude"],
        output_path=str(work / _OUTPUT),
        log_level="WARNING",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m generator.builder.stages.precision.model_optimizer WORKDIR`` (run by the parent build)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m generator.builder.stages.precision.model_optimizer WORKDIR", file=sys.stderr)
        return 2
    _quantize_in_child(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
