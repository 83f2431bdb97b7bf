"""Find the detection head's numerically fragile tail by walking back from the graph outputs.

Everything between the last feature convolutions and the outputs is tiny in compute but decides
the numbers the user sees: the class scores (final class conv, Sigmoid, Concat) and the box decode
(DFL Softmax plus its fixed-weight Conv, grid offsets, stride multiply, coordinates up to the
input size, where FP16 spacing is already 0.25-0.5 px). Keeping that tail in FP32 costs almost
nothing and avoids the mAP loss reported for reduced-precision score layers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import onnx

# A Conv fed by one of these is part of the decode (the DFL integral), not a feature convolution.
_DECODE_CONV_INPUT_OPS = frozenset({"Softmax"})


@dataclass(frozen=True)
class DetectionHead:
    """Node names of the head tail, in graph order.

    ``tail`` holds every node from the final convolutions (inclusive) to the outputs;
    ``final_convs`` the convolutions where the walk stopped; ``score_path`` the tail nodes on the
    path through a Sigmoid (the class-score branch).
    """

    tail: tuple[str, ...]
    final_convs: tuple[str, ...]
    score_path: tuple[str, ...]


def ensure_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy whose top-level nodes all have unique names.

    Block lists and ``nodes_to_exclude`` address nodes by name; exporters may leave names empty.
    """
    named = onnx.ModelProto()
    named.CopyFrom(model)
    taken = {node.name for node in named.graph.node if node.name}
    seen: set[str] = set()
    for index, node in enumerate(named.graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = f"{node.op_type}_{index}"
        candidate = base
        suffix = 0
        while candidate in taken or candidate in seen:
            suffix += 1
            candidate = f"{base}_{suffix}"
        node.name = candidate
        seen.add(candidate)
        taken.add(candidate)
    return named


def find_detection_head(model: onnx.ModelProto) -> DetectionHead:
    """Walk back from every graph output, stopping at feature convolutions.

    A Conv whose data input comes from a Softmax (the DFL box integral) is decode, so the walk
    continues through it. Node names must be unique (see :func:`ensure_node_names`).
    """
    graph = model.graph
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for output in node.output:
            if output:
                producer[output] = index

    def is_feature_conv(index: int) -> bool:
        node = nodes[index]
        if node.op_type != "Conv":
            return False
        source = producer.get(node.input[0])
        return source is None or nodes[source].op_type not in _DECODE_CONV_INPUT_OPS

    tail: set[int] = set()
    stops: set[int] = set()
    queue = deque(producer[o.name] for o in graph.output if o.name in producer)
    while queue:
        index = queue.popleft()
        if index in tail:
            continue
        tail.add(index)
        if is_feature_conv(index):
            stops.add(index)
            continue
        for name in nodes[index].input:
            if name in producer:
                queue.append(producer[name])

    score = _score_path(nodes, tail, producer)
    ordered = sorted(tail)
    return DetectionHead(
        tail=tuple(nodes[i].name for i in ordered),
        final_convs=tuple(nodes[i].name for i in ordered if i in stops),
        score_path=tuple(nodes[i].name for i in ordered if i in score),
    )


def _score_path(nodes: list[onnx.NodeProto], tail: set[int], producer: dict[str, int]) -> set[int]:
    """Tail nodes that are ancestors or descendants of a tail Sigmoid, within the tail."""
    sigmoids = {i for i in tail if nodes[i].op_type == "Sigmoid"}
    consumers: dict[int, set[int]] = {i: set() for i in tail}
    for i in tail:
        for name in nodes[i].input:
            source = producer.get(name)
            if source is not None and source in tail:
                consumers[source].add(i)

    path: set[int] = set(sigmoids)
    up = deque(sigmoids)
    while up:
        i = up.popleft()
        for name in nodes[i].input:
            source = producer.get(name)
            if source is not None and source in tail and source not in path:
                path.add(source)
                up.append(source)
    down = deque(sigmoids)
    reached: set[int] = set()
    while down:
        i = down.popleft()
        for j in consumers[i]:
            if j not in reached:
                reached.add(j)
                down.append(j)
    return path | reached
