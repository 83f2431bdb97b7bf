"""The speed gate's mechanism: paired rounds at the served batch sizes, the decision rule, what it records.

Speeds themselves are not asserted (the machine is shared); the decision is held to the rule on what was measured.
"""

from __future__ import annotations

import json

import onnx
import onnxruntime
import pytest

from generator.builder.pipeline import _served_graph
from generator.builder.spec.options import BuildOptions, GateOptions
from generator.builder.stages.precision.fp16 import convert_fp16
from generator.builder.stages.speed_gate import ROUNDS, decide, served_batch_sizes, speed_gate
from generator.model.onnx_inspect import inspect_onnx
from tests.fixtures.ultralytics import write


def test_faster_needs_the_margin_and_most_rounds():
    assert decide("int8", [1.3] * 7, 5.0, "keep-faster")[0] == "int8"
    assert decide("int8", [1.04] * 7, 5.0, "keep-faster")[0] == "fp32"  # inside the margin
    # A median over the margin but lost rounds on a busy machine: not shown to be faster.
    assert decide("fp16", [2.0, 2.0, 2.0, 0.9, 0.9, 0.9, 0.9], 5.0, "keep-faster")[0] == "fp32"
    kept, speedup, won, verdict = decide("fp16", [0.5, 0.6, 0.7], 5.0, "keep-faster")
    assert (kept, speedup, won) == ("fp32", 0.6, 0) and "serving FP32 instead" in verdict
    kept, _, _, verdict = decide("int8", [0.5] * 3, 5.0, "record")
    assert kept == "int8" and "kept int8 as asked" in verdict
    assert decide("int8", [1.2] * 3, 0.0, "keep-faster")[0] == "int8"


def test_batch_sizes_are_the_served_ones(tmp_path):
    dynamic = inspect_onnx(write("yolov8-dynamic", tmp_path))
    static = inspect_onnx(write("yolov8-static", tmp_path))
    assert served_batch_sizes(BuildOptions(max_batch=4), dynamic) == (1, 4)
    assert served_batch_sizes(BuildOptions(max_batch=1), dynamic) == (1,)
    assert served_batch_sizes(BuildOptions(max_batch=4), static) == (static.static_batch,)


def test_what_the_build_cannot_run_is_not_timed_and_keeps_the_precision(tmp_path):
    model = onnx.load(str(write("yolov8-dynamic", tmp_path)))
    info = inspect_onnx(tmp_path / "yolov8-dynamic.onnx")
    plan = speed_gate(model, model, info, BuildOptions(target="tensorrt", precision="fp16"))
    assert plan.kept == "fp16" and plan.measured_on.startswith("not measured: the TensorRT plan")
    assert plan.rounds == 0 and plan.speedup is None
    off = speed_gate(model, model, info, BuildOptions(precision="int8", gate=GateOptions(speed_gate="off")))
    assert off.kept == "int8" and off.measured_on == "not measured: --speed-gate off"
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        gpu = speed_gate(model, model, info, BuildOptions(precision="fp16", device="gpu"))
        assert gpu.kept == "fp16" and "no CUDA provider" in gpu.measured_on


@pytest.mark.parametrize("family", ["yolov8", "yolo11"])
def test_paired_rounds_on_the_served_graphs_decide_by_the_rule(family, tmp_path):
    onnx_path = write(f"{family}-dynamic", tmp_path)
    model, info = onnx.load(str(onnx_path)), inspect_onnx(onnx_path)
    options = BuildOptions(precision="fp16", max_batch=2)
    fp32, info_served = _served_graph(model, info, options)
    fp16, _ = _served_graph(convert_fp16(model), info, options)
    decision = speed_gate(fp32, fp16, info_served, options)
    assert decision.measured_on.startswith("onnxruntime CPU") and decision.rounds == ROUNDS
    assert decision.batch_sizes == (1, 2) and all(ms > 0 for ms in [*decision.fp32_ms.values(),
                                                                     *decision.candidate_ms.values()])
    assert decision.speedup is not None
    faster = decision.speedup >= 1.05 and decision.faster_rounds > ROUNDS / 2
    assert decision.kept == ("fp16" if faster else "fp32")
    assert json.loads(decision.to_fact())["kept"] == decision.kept
    forced = speed_gate(fp32, fp16, info_served, BuildOptions(precision="fp16", max_batch=2,
                                                              gate=GateOptions(speed_gate="record")))
    assert forced.kept == "fp16" and forced.mode == "record"
