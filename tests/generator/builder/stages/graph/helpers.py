"""Helpers of the graph stage tests: a bare head model and a run of it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def head_model(opset: int = 17, elem_type: int = TensorProto.FLOAT,
               shape: tuple[int | str, ...] = ("batch", 7, "anchors")) -> onnx.ModelProto:
    """A graph that outputs its input: any head values can be fed through the suffix."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["head"], ["output0"])], "head",
        [helper.make_tensor_value_info("head", elem_type, list(shape))],
        [helper.make_tensor_value_info("output0", elem_type, list(shape))],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, feed)
    return out
