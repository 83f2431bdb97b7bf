"""Unit checks of the health-check script; its behaviour against a real server is in test_triton_integration."""

from __future__ import annotations

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


def test_shim_runs_alone_next_to_a_copy_of_the_watchdog(tmp_path: Path) -> None:
    """In the Triton image neither the project nor site-packages are there: only the two copied files."""
    import shutil
    import socket
    import subprocess

    from generator.server import watchdog

    shutil.copy(healthcheck.__file__, tmp_path / "healthcheck.py")
    shutil.copy(watchdog.__file__, tmp_path / "watchdog.py")
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-S", "-I", str(tmp_path / "healthcheck.py"), "--url", f"127.0.0.1:{port}",
             "--ensemble", "yolo", "--models", "yolo_nms"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
    assert proc.returncode == 1
    assert proc.stderr.startswith("unhealthy: cannot reach Triton at 127.0.0.1:") and proc.stderr.count("\n") == 1
