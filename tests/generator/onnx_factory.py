"""Small but real ONNX graphs for the generator tests, built with ``onnx.helper``.

The detector is one strided Conv (a 64x64 input becomes an 8x8 grid = 64 anchors) whose channels are
reshaped into a YOLO head: ``v8`` [N, 4+nc, A], ``v5`` [N, A, 5+nc] or ``end2end`` [N, A, 6]. Weights
come from a seeded generator, so two calls with the same seed differ only in what was asked (e.g. the
batch axis), which lets tests compare a static-batch export with its dynamic twin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
STRIDE = 8  # the single Conv's stride: each 8x8 patch is one anchor
DEFAULT_NAMES = ("a", "b")
DEFAULT_SIZE = (64, 64)


def ultralytics_metadata(
    names: tuple[str, ...] | None = DEFAULT_NAMES,
    imgsz: tuple[int, int] | None = DEFAULT_SIZE,
    task: str | None = "detect",
    stride: int | None = 32,
    **extra: str,
) -> dict[str, str]:
    """metadata_props the way Ultralytics writes them: Python literals as strings."""
    meta: dict[str, str] = {}
    if names is not None:
        meta["names"] = str(dict(enumerate(names)))
    if imgsz is not None:
        meta["imgsz"] = str(list(imgsz))
    if stride is not None:
        meta["stride"] = str(stride)
    if task is not None:
        meta["task"] = task
    meta.update(extra)
    return meta


def head_channels(head: str, num_classes: int) -> int:
    return {"v8": 4 + num_classes, "v5": 5 + num_classes, "end2end": 6}[head]


def _finish(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    metadata: dict[str, str] | None,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "factory", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tests")
    model.ir_version = IR_VERSION
    for key, value in (metadata or {}).items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.checker.check_model(model)
    return model


def _conv_trunk(
    rng: np.random.Generator,
    image: str,
    input_dtype: int,
    channels: int,
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
) -> str:
    """Conv(kernel=stride=STRIDE) -> Sigmoid -> [N, channels, A]; multiply by "head.scale" for pixels."""
    x = image
    if input_dtype != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", [image], ["image_f32"], to=TensorProto.FLOAT))
        x = "image_f32"
    scale = np.ones(channels, dtype=np.float32)
    scale[:4] = 64.0
    weight = (rng.standard_normal((channels, 3, STRIDE, STRIDE)) * 0.2).astype(np.float32)
    bias = (rng.standard_normal(channels) * 0.5).astype(np.float32)
    inits += [
        numpy_helper.from_array(weight, "conv.weight"),
        numpy_helper.from_array(bias, "conv.bias"),
        numpy_helper.from_array(np.array([0, channels, -1], dtype=np.int64), "head.shape"),
        # Box channels become input pixels; score channels stay in (0, 1).
        numpy_helper.from_array(scale.reshape(1, channels, 1), "head.scale"),
    ]
    nodes += [
        helper.make_node("Conv", [x, "conv.weight", "conv.bias"], ["conv"], kernel_shape=[STRIDE, STRIDE],
                         strides=[STRIDE, STRIDE]),
        helper.make_node("Sigmoid", ["conv"], ["sig"]),
        helper.make_node("Reshape", ["sig", "head.shape"], ["flat"]),
    ]
    return "flat"


def make_detector(
    head: str = "v8",
    num_classes: int = 2,
    batch: int | str = "batch",
    size: tuple[int | str, int | str] = DEFAULT_SIZE,
    metadata: dict[str, str] | None = None,
    input_dtype: int = TensorProto.FLOAT,
    seed: int = 0,
) -> onnx.ModelProto:
    """A tiny conv detector with the requested head; ``batch``/``size`` as ints are static, str dynamic."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    channels = head_channels(head, num_classes)
    flat = _conv_trunk(rng, "images", input_dtype, channels, nodes, inits)
    anchors: int | str = "anchors"
    if isinstance(size[0], int) and isinstance(size[1], int):
        anchors = (size[0] // STRIDE) * (size[1] // STRIDE)
    if head == "v8":
        nodes.append(helper.make_node("Mul", [flat, "head.scale"], ["output0"]))
        out_shape: list[int | str] = [batch, channels, anchors]
    else:
        nodes.append(helper.make_node("Mul", [flat, "head.scale"], ["scaled"]))
        nodes.append(helper.make_node("Transpose", ["scaled"], ["output0"], perm=[0, 2, 1]))
        out_shape = [batch, anchors, channels]
    inputs = [helper.make_tensor_value_info("images", input_dtype, [batch, 3, size[0], size[1]])]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, out_shape)]
    return _finish(nodes, inits, inputs, outputs, metadata)


def make_seg_model(metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """Two outputs, like a YOLO segmentation export (detections + mask prototypes)."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    flat = _conv_trunk(rng, "images", TensorProto.FLOAT, 6, nodes, inits)
    nodes.append(helper.make_node("Identity", [flat], ["output0"]))
    nodes.append(helper.make_node("Identity", ["conv"], ["output1"]))
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])]
    outputs = [
        helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 64]),
        helper.make_tensor_value_info("output1", TensorProto.FLOAT, [1, 6, 8, 8]),
    ]
    return _finish(nodes, inits, inputs, outputs, metadata)


def make_bad_rank_model(metadata: dict[str, str] | None = None) -> onnx.ModelProto:
    """A classifier-like 2-D output [N, 384]."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    flat = _conv_trunk(rng, "images", TensorProto.FLOAT, 6, nodes, inits)
    nodes.append(helper.make_node("Flatten", [flat], ["output0"], axis=1))
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 384])]
    return _finish(nodes, inits, inputs, outputs, metadata)


def make_int_input_model() -> onnx.ModelProto:
    """A detector whose input is uint8 NCHW (not an Ultralytics float export)."""
    return make_detector(input_dtype=TensorProto.UINT8, batch=1)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path
