"""A small but real YOLO-shaped detector graph built with onnx.helper.

Body: Conv+SiLU stages, a Resize upsample and a skip Concat. Head: a DFL-like box branch
(Conv -> Reshape -> Transpose -> Softmax -> fixed-weight Conv -> stride Mul) and a class branch
(Conv -> Reshape -> Sigmoid), joined by a Concat into [N, 4 + nc, A] like Ultralytics exports.
The box conv's bias initializer is shared with a body conv, as onnxslim leaves it in real exports.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NUM_CLASSES = 3
INPUT_HW = (32, 32)
REG = 4  # DFL bins per box side
ANCHORS = 64  # 8 x 8 grid


def build_toy_detector(batch: int | str = 1, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        std = scale if scale is not None else np.sqrt(2.0 / fan_in)
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), name))
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def conv_silu(
        name: str, x: str, cin: int, cout: int, k: int, stride: int, bias: str | None = None
    ) -> str:
        w = weight(f"{name}.weight", (cout, cin, k, k))
        b = bias or weight(f"{name}.bias", (cout,), 0.1)
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [f"{name}_conv"],
                name=f"{name}/Conv",
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
            )
        )
        nodes.append(helper.make_node("Sigmoid", [f"{name}_conv"], [f"{name}_sig"], name=f"{name}/Sigmoid"))
        nodes.append(
            helper.make_node("Mul", [f"{name}_conv", f"{name}_sig"], [f"{name}_out"], name=f"{name}/Mul")
        )
        return f"{name}_out"

    shared_bias = weight("shared.bias", (REG * 4,), 0.1)
    c1 = conv_silu("c1", "images", 3, 16, 3, 2, bias=shared_bias)  # 16x16
    c2 = conv_silu("c2", c1, 16, 16, 3, 2)  # 8x8
    scales = const("up.scales", np.array([1, 1, 2, 2], dtype=np.float32))
    nodes.append(helper.make_node("Resize", [c2, "", scales], ["up_out"], name="up/Resize", mode="nearest"))
    nodes.append(helper.make_node("Concat", [c1, "up_out"], ["cat_out"], name="cat/Concat", axis=1))
    c3 = conv_silu("c3", "cat_out", 32, 16, 3, 2)  # 8x8 features

    # Box branch (DFL-like).
    nodes.append(
        helper.make_node(
            "Conv",
            [c3, weight("box.weight", (REG * 4, 16, 1, 1)), shared_bias],
            ["box_conv"],
            name="head/box/Conv",
            kernel_shape=[1, 1],
        )
    )
    nodes.append(
        helper.make_node(
            "Reshape",
            ["box_conv", const("box.shape", np.array([-1, 4, REG, ANCHORS], np.int64))],
            ["box_r"],
            name="head/box/Reshape",
        )
    )
    nodes.append(
        helper.make_node("Transpose", ["box_r"], ["box_t"], name="head/dfl/Transpose", perm=[0, 2, 1, 3])
    )
    nodes.append(helper.make_node("Softmax", ["box_t"], ["box_sm"], name="head/dfl/Softmax", axis=1))
    dfl_w = const("dfl.weight", np.arange(REG, dtype=np.float32).reshape(1, REG, 1, 1))
    nodes.append(
        helper.make_node("Conv", ["box_sm", dfl_w], ["dfl_out"], name="head/dfl/Conv", kernel_shape=[1, 1])
    )
    nodes.append(
        helper.make_node(
            "Reshape",
            ["dfl_out", const("dfl.shape", np.array([-1, 4, ANCHORS], np.int64))],
            ["dist"],
            name="head/dfl/Reshape",
        )
    )
    nodes.append(
        helper.make_node(
            "Mul", ["dist", const("stride", np.array(4.0, np.float32))], ["boxes"], name="head/Mul"
        )
    )

    # Class branch.
    nodes.append(
        helper.make_node(
            "Conv",
            [
                c3,
                weight("cls.weight", (NUM_CLASSES, 16, 1, 1)),
                const("cls.bias", np.full(NUM_CLASSES, -1.0, np.float32)),
            ],
            ["cls_conv"],
            name="head/cls/Conv",
            kernel_shape=[1, 1],
        )
    )
    nodes.append(
        helper.make_node(
            "Reshape",
            ["cls_conv", const("cls.shape", np.array([-1, NUM_CLASSES, ANCHORS], np.int64))],
            ["cls_r"],
            name="head/cls/Reshape",
        )
    )
    nodes.append(helper.make_node("Sigmoid", ["cls_r"], ["scores"], name="head/Sigmoid"))
    nodes.append(helper.make_node("Concat", ["boxes", "scores"], ["output0"], name="head/Concat", axis=1))

    graph = helper.make_graph(
        nodes,
        "toy_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, *INPUT_HW])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [batch, 4 + NUM_CLASSES, ANCHORS])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"names": "{0: 'circle', 1: 'square', 2: 'star'}", "imgsz": "[32, 32]"})
    onnx.checker.check_model(model, full_check=True)
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"images": x})[0])
