"""The GPU proof's own parts that run anywhere: the tritonclient-free HTTP encoding and the detection comparison.

The proof itself ran on the H200 (docs/results/gpu/); its dry run (``--build DIR --dry-run``, CPU preprocess
everywhere) serves the same four ensembles on the embedded Triton here.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from generator.serving.contract import BOXES, CLASSES, NUM_DETECTIONS, SCORES
from tools.gpu.gpu_http import decode_response, encode_images, infer_body
from tools.gpu.gpu_proof import compare_detections


def test_bytes_are_length_prefixed_like_tritonclient() -> None:
    assert encode_images([b"ab", b""]) == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
    body, header_length = infer_body([b"jpeg"], ("LETTERBOX",))
    header = json.loads(body[:header_length])
    (tensor,) = header["inputs"]
    assert tensor["shape"] == [1, 1] and tensor["datatype"] == "BYTES"
    assert tensor["parameters"]["binary_data_size"] == len(body) - header_length == 8
    assert header["outputs"] == [{"name": "LETTERBOX", "parameters": {"binary_data": True}}]


def test_binary_outputs_are_split_by_their_declared_sizes() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(1, 6), np.array([[3]], dtype=np.int32)
    header = json.dumps({"outputs": [
        {"name": "A", "datatype": "FP32", "shape": [1, 6], "parameters": {"binary_data_size": a.nbytes}},
        {"name": "B", "datatype": "INT32", "shape": [1, 1], "parameters": {"binary_data_size": b.nbytes}}]}).encode()
    out = decode_response(header + a.tobytes() + b.tobytes(), len(header))
    np.testing.assert_array_equal(out["A"], a)
    np.testing.assert_array_equal(out["B"], b)


def detections(boxes: list[list[float]], scores: list[float], classes: list[int]) -> dict[str, np.ndarray]:
    padded = np.zeros((1, 5, 4), np.float32)
    padded[0, : len(boxes)] = boxes
    return {NUM_DETECTIONS: np.array([[len(boxes)]], np.int32), BOXES: padded,
            SCORES: np.pad(np.array([scores], np.float32), ((0, 0), (0, 5 - len(scores)))),
            CLASSES: np.pad(np.array([classes], np.int32), ((0, 0), (0, 5 - len(classes))))}


def test_detections_match_by_class_and_overlap() -> None:
    ref = detections([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2])
    assert compare_detections(ref, ref)["identical"]
    moved = detections([[0, 0, 10, 10.2], [20, 20, 40, 40]], [0.89, 0.8], [1, 0])
    row = compare_detections(ref, moved)
    assert not row["identical"] and row["matched"] == 1 and row["max_score_diff"] > 0.009
