"""--int8-tool modelopt: NVIDIA Model Optimizer's placement, our FP16 conversion, TensorRT's parser rules.

``.ci/run`` installs the ``int8-modelopt`` extra where pip finds a CPU build of torch (or with TDE_MODELOPT=1)
and then sets TDE_MODELOPT=1, so these tests must run; elsewhere they are skipped only when Model Optimizer is
not installed, and the missing-extra error is tested either way.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from generator.builder.stages.precision.errors import PrecisionError
from generator.builder.stages.precision.fp16 import fp32_node_names
from generator.builder.stages.precision.head import find_detection_head
from generator.builder.stages.precision.int8 import Int8Options, quantize_int8
from generator.builder.stages.precision.model_optimizer import EXTRA, require_model_optimizer
from generator.builder.stages.precision.tensorrt_compat import find_incompatibilities, quantization_summary
from tests.generator.builder.stages.precision.toy_detector import run

INSTALLED = importlib.util.find_spec("modelopt") is not None
needs_modelopt = pytest.mark.skipif(
    not INSTALLED and os.environ.get("TDE_MODELOPT") != "1",
    reason=f"NVIDIA Model Optimizer is not installed (pip install '.[{EXTRA}]' after a CPU build of torch; "
           ".ci/run does where it finds one, or with TDE_MODELOPT=1)")


@pytest.fixture(scope="module")
def modelopt_result(toy_model, scene_batches, tmp_path_factory):
    return quantize_int8(toy_model, scene_batches, Int8Options(tool="modelopt"),
                         cache_dir=tmp_path_factory.mktemp("calib"), progress=None)


@needs_modelopt
def test_modelopt_graph_parses_in_tensorrt_and_keeps_the_head_in_fp32(toy_model, modelopt_result):
    model = modelopt_result.model
    assert find_incompatibilities(model) == []
    assert "INT8" in quantization_summary(model) and "INT32" not in quantization_summary(model)
    assert set(find_detection_head(toy_model).tail) <= set(fp32_node_names(model))
    quantized_inputs = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    # Model Optimizer also quantizes the Concat output feeding c3 (TensorRT fuses it), not only conv weights.
    assert "cat_out" in quantized_inputs
    assert modelopt_result.tool == "modelopt" and modelopt_result.cache_path is None


@needs_modelopt
def test_modelopt_graph_runs_close_to_fp32(toy_model, scene_batches, modelopt_result):
    ref = np.concatenate([run(toy_model, b) for b in scene_batches])
    out = np.concatenate([run(modelopt_result.model, b) for b in scene_batches])
    assert out.dtype == np.float32 and out.shape == ref.shape
    assert np.abs(out[:, 4:] - ref[:, 4:]).max() < 0.05


def test_missing_extra_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "modelopt" else real(name, *a))
    with pytest.raises(PrecisionError, match=rf"pip install 'triton-detection-ensemble\[{EXTRA}\]'.*--int8-tool ort"):
        require_model_optimizer()


@needs_modelopt
def test_ort_tool_still_works_in_the_same_process_afterwards(toy_model, scene_batches, modelopt_result, tmp_path):
    # Model Optimizer patches ONNX Runtime's calibrators process-wide; it runs in a child process for that.
    result = quantize_int8(toy_model, scene_batches[:2], Int8Options(tool="ort"), cache_dir=tmp_path, progress=None)
    assert find_incompatibilities(result.model) == []


@needs_modelopt
def test_a_failing_model_optimizer_run_is_one_clear_error(toy_model):
    from generator.builder.stages.precision.model_optimizer import quantize_with_model_optimizer

    wrong_size = [np.zeros((1, 3, 16, 16), np.float32)]  # the toy detector takes 32x32
    with pytest.raises(PrecisionError, match=r"^Model Optimizer INT8 quantization failed: \S+: .*INVALID_ARGUMENT.*Expected: 32"):
        quantize_with_model_optimizer(toy_model, wrong_size, "minmax", ())
