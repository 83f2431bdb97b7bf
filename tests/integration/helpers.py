"""Helpers of the integration tests: requests to the served ensemble, hostile images, Triton's counters."""

from __future__ import annotations

import asyncio
import re
import struct
import time
import urllib.request
import zlib

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from clients import AsyncDetectionClient, DetectionClient
from generator.synthetic import encode, make_scene
from tests.generator.serving.helpers import progressive, with_repeated_scan

OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


def infer(server, model: str, images: list[bytes], protocol: str = "grpc") -> dict[str, np.ndarray]:
    module = grpcclient if protocol == "grpc" else httpclient
    url = server.grpc_url if protocol == "grpc" else server.http_url
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object).reshape(-1, 1))
    outputs = [module.InferRequestedOutput(name) for name in OUTPUTS]
    result = client.infer(model, [tensor], outputs=outputs)
    return {name: result.as_numpy(name) for name in OUTPUTS}


def scene_bytes(seed: int, width: int, height: int, fmt: str = ".jpg") -> bytes:
    return encode(make_scene(np.random.default_rng(seed), width, height).image, fmt)


def assert_matches_reference(served: dict[str, np.ndarray], expected, index: int = 0) -> None:
    count = int(served["num_detections"][index, 0])
    assert count == len(expected.scores)
    np.testing.assert_allclose(served["detection_boxes"][index, :count], expected.boxes, atol=1e-3)
    np.testing.assert_allclose(served["detection_scores"][index, :count], expected.scores, atol=1e-5)
    np.testing.assert_array_equal(served["detection_classes"][index, :count], expected.classes)
    # Padding past the count is zero, so clients can trust num_detections alone.
    assert not served["detection_scores"][index, count:].any()


def png_declaring(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def jpeg_declaring(width: int, height: int) -> bytes:
    real = scene_bytes(1, 64, 48)
    marker = real.find(b"\xff\xc0")
    return real[: marker + 5] + struct.pack(">HH", height, width) + real[marker + 9 :]


def png_over_the_decode_budget() -> bytes:
    """38 megapixels, inside every size limit; its decode would take far longer than the 250 ms budget."""
    import cv2

    return cv2.imencode(".png", np.zeros((6200, 6200, 3), np.uint8))[1].tobytes()


HOSTILE = {
    "empty": (b"", "empty image"),
    "garbage": (b"this is not an image at all" * 10, "unsupported or unrecognised image format"),
    "gif": (b"GIF89a" + b"\0" * 64, "unsupported or unrecognised image format"),
    "truncated_jpeg": (None, "truncated JPEG"),
    "truncated_png": (None, "truncated PNG"),
    "png_bomb_68_bytes": (png_declaring(50000, 50000), "declares 50000x50000 pixels"),
    "jpeg_bomb_header": (None, "declares 30000x30000 pixels"),
    "jpeg_scan_bomb": (None, "jpeg image has more than 64 scans, above the limit of 64"),
    "png_over_decode_budget": (None, "png image of 6200x6200 pixels would take about"),
}


def hostile_bytes(case: str) -> bytes:
    data, _ = HOSTILE[case]
    if data is not None:
        return data
    if case == "truncated_jpeg":
        full = scene_bytes(3, 640, 480)
        return full[: len(full) // 2]
    if case == "truncated_png":
        full = scene_bytes(3, 320, 240, ".png")
        return full[: len(full) // 2]
    if case == "jpeg_scan_bomb":
        return with_repeated_scan(progressive(480, 640), 5000)  # libjpeg would decode every copy
    if case == "png_over_decode_budget":
        return png_over_the_decode_budget()
    return jpeg_declaring(30000, 30000)


MODES = ("sync", "async")


PROTOCOLS = ("grpc", "http")


def url_for(server, protocol: str) -> str:
    return f"{protocol}://{server.grpc_url if protocol == 'grpc' else server.http_url}"


def run(mode: str, server, protocol: str, call: str, *args, **client_kwargs):
    """Call `call` on a fresh sync or async client (with the admin key, unless given); returns its result."""
    kwargs = {"model": server.model_name, "timeout_s": 30.0, "admin_key": server.admin_key, **client_kwargs}
    if mode == "sync":
        with DetectionClient(url_for(server, protocol), **kwargs) as client:
            return getattr(client, call)(*args)

    async def go():
        async with AsyncDetectionClient(url_for(server, protocol), **kwargs) as client:
            return await getattr(client, call)(*args)

    return asyncio.run(go())


def metric(server, name: str) -> float:
    """Sum of a Prometheus counter for the ensemble (all versions)."""
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = re.compile(rf'^{name}\{{[^}}]*model="{re.escape(server.model_name)}"[^}}]*\}} (\S+)$', re.M)
    values = [float(v) for v in pattern.findall(text)]
    assert values, f"no {name} for {server.model_name} in /metrics"
    return sum(values)


def metric_delta(server, name: str, before: float, expected: float, timeout_s: float = 3.0) -> float:
    """The counter's growth since ``before``; Triton updates counters just after the response, so poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        delta = metric(server, name) - before
        if delta >= expected or time.monotonic() > deadline:
            return delta
        time.sleep(0.05)
