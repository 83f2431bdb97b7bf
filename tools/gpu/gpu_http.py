"""A dependency-free Triton HTTP client for the GPU proof, and a multi-process load driver.

The lent GPU machine has no tritonclient (its 2.51 HTTP client needs a geventhttpclient without a CPython 3.12
wheel), so the proof speaks the KServe v2 protocol with Triton's binary tensor extension itself: a JSON header
of ``Inference-Header-Content-Length`` bytes, then the raw tensors. BYTES elements are 4-byte little-endian
lengths followed by the bytes, as ``tritonclient.utils.serialize_byte_tensor`` writes them.
"""

from __future__ import annotations

import http.client
import json
import struct
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from generator.serving.contract import IMAGE, IMAGE_DATATYPE, OUTPUTS

_NUMPY = {"FP32": np.float32, "INT32": np.int32, "UINT8": np.uint8, "FP16": np.float16, "INT64": np.int64}


class InferError(RuntimeError):
    """Triton answered with an error; ``str()`` is its message."""


def encode_images(images: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(data)) + data for data in images)


def infer_body(images: Sequence[bytes], outputs: Sequence[str]) -> tuple[bytes, int]:
    """(request body, JSON header length) for ``[len(images), 1]`` encoded images."""
    payload = encode_images(images)
    header = json.dumps({
        "inputs": [{"name": IMAGE, "shape": [len(images), 1], "datatype": IMAGE_DATATYPE,
                    "parameters": {"binary_data_size": len(payload)}}],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }).encode()
    return header + payload, len(header)


def decode_response(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """Outputs of a binary-extension response, by name."""
    size = header_length if header_length is not None else len(body)
    header = json.loads(body[:size])
    arrays: dict[str, np.ndarray] = {}
    offset = size
    for output in header.get("outputs", []):
        length = int(output["parameters"]["binary_data_size"])
        raw = body[offset : offset + length]
        offset += length
        arrays[output["name"]] = np.frombuffer(raw, dtype=_NUMPY[output["datatype"]]).reshape(output["shape"])
    return arrays


class TritonHttp:
    """One keep-alive connection (not thread-safe: one per thread)."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        host, _, port = url.partition(":")
        self.connection = http.client.HTTPConnection(host, int(port or 8000), timeout=timeout_s)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        self.connection.request(method, path, body=body, headers=headers or {})
        response = self.connection.getresponse()
        return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}

    def infer(self, model: str, images: Sequence[bytes], outputs: Sequence[str] = OUTPUTS) -> dict[str, np.ndarray]:
        body, header_length = infer_body(images, outputs)
        status, data, headers = self.request("POST", f"/v2/models/{model}/infer", body, {
            "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(header_length)})
        if status != 200:
            raise InferError(json.loads(data).get("error", data.decode(errors="replace")))
        length = headers.get("inference-header-content-length")
        return decode_response(data, int(length) if length is not None else None)

    def json(self, path: str) -> Any:
        status, data, _ = self.request("GET", path)
        if status != 200:
            raise InferError(f"GET {path}: HTTP {status} {data[:200]!r}")
        return json.loads(data)


@dataclass(frozen=True)
class Load:
    url: str
    model: str
    requests: tuple[tuple[bytes, ...], ...]  # each a request's images, sent round robin
    outputs: tuple[str, ...]
    seconds: float
    threads: int


def _worker(load: Load) -> tuple[int, int, int, list[float]]:
    """One process: ``load.threads`` threads, each with its own connection; (requests, images, errors, latencies)."""
    done = [0, 0, 0]
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + load.seconds

    def run(offset: int) -> None:
        client = TritonHttp(load.url)
        i = offset
        while time.perf_counter() < deadline:
            images = load.requests[i % len(load.requests)]
            i += 1
            start = time.perf_counter()
            try:
                client.infer(load.model, images, load.outputs)
                failed = 0
            except InferError:
                failed = 1
            with lock:
                done[0] += 1
                done[1] += len(images)
                done[2] += failed
                latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=run, args=(k * 7,)) for k in range(load.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0], done[1], done[2], latencies


def drive(load: Load, concurrency: int, processes: int = 8) -> dict[str, float]:
    """Keep ``concurrency`` requests in flight for ``load.seconds``; images/s, requests/s and latency."""
    procs = max(1, min(processes, concurrency))
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    start = time.perf_counter()
    with ProcessPoolExecutor(procs) as pool:
        results = list(pool.map(_worker, [Load(load.url, load.model, load.requests, load.outputs, load.seconds, n)
                                          for n in per]))
    elapsed = time.perf_counter() - start
    latencies = sorted(x for r in results for x in r[3])
    wall = max(load.seconds, 1e-9)
    return {
        "concurrency": concurrency, "requests": sum(r[0] for r in results), "errors": sum(r[2] for r in results),
        "images_per_s": round(sum(r[1] for r in results) / wall, 1),
        "requests_per_s": round(sum(r[0] for r in results) / wall, 1),
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 2) if latencies else float("nan"),
        "p95_ms": round(1000 * latencies[int(len(latencies) * 0.95)], 2) if latencies else float("nan"),
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 2) if latencies else float("nan"),
        "elapsed_s": round(elapsed, 2),
    }
