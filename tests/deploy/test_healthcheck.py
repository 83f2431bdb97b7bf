"""Unit checks of the health-check script; its behaviour against a real server is in test_triton_integration."""

from __future__ import annotations

import ast
import json
import struct
import sys
from pathlib import Path

import cv2
import numpy as np

from deploy import healthcheck


def test_probe_jpeg_is_a_real_small_image() -> None:
    image = cv2.imdecode(np.frombuffer(healthcheck.PROBE_JPEG, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None and image.shape == (32, 32, 3)
    assert len(healthcheck.PROBE_JPEG) < 1024


def test_infer_body_follows_the_binary_tensor_extension() -> None:
    body, header_len = healthcheck.build_infer_body(b"abc")
    header = json.loads(body[:header_len])
    (inp,) = header["inputs"]
    assert inp["name"] == "IMAGE" and inp["datatype"] == "BYTES" and inp["shape"] == [1, 1]
    assert inp["parameters"]["binary_data_size"] == 4 + 3 == len(body) - header_len
    assert struct.unpack("<I", body[header_len : header_len + 4]) == (3,)
    assert body[header_len + 4 :] == b"abc"
    assert header["outputs"] == [{"name": "num_detections", "parameters": {"binary_data": False}}]


def test_script_uses_only_the_standard_library() -> None:
    """It runs inside the Triton image, where the project and its dependencies are not installed."""
    tree = ast.parse(Path(healthcheck.__file__).read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots - {"__future__"} <= set(sys.stdlib_module_names)
