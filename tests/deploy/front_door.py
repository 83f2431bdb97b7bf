"""The reproducers of the Triton crashes and bypasses fixed after 2.51 (docs/SECURITY.md), as raw requests.

Each is sent the way an attacker would: raw bytes over TLS to the proxy's public HTTPS port (no client library
that would tidy the request up), or with tritonclient's gRPC stubs for the RPCs. The fast lane
(test_front_door_integration.py) sends them to the rendered nginx in front of a real Triton 2.51; the live lane
(live/test_front_door.py) to the compose stack with legitimate traffic running.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy import screening

MODEL = "yolo"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> str:
        """The ``error`` of the JSON body (fails on HTML or anything else that is not the protocol's JSON error)."""
        try:
            return str(json.loads(self.body)["error"])
        except (ValueError, KeyError, TypeError):
            raise AssertionError(f"not a JSON error: {self.status} {self.body[:200]!r}") from None


def from_the_proxy(answers: dict[str, Answer], conf: str) -> dict[str, str]:
    """The answers whose JSON error is NOT one the proxy's config writes itself (empty: nginx answered them all,
    from its own ``return``, without asking Triton)."""
    return {name: a.error() for name, a in answers.items()
            if json.dumps({"error": a.error()}, separators=(",", ":")) not in conf}


def send_raw(port: int, ca: Path, head: bytes, body_parts: list[bytes] | tuple[bytes, ...] = (),
             timeout_s: float = 30) -> Answer:
    """One HTTP/1.1 request as raw bytes over TLS; the answer parsed (the body up to Content-Length)."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("localhost", port), timeout=timeout_s) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(head)
        try:
            for part in body_parts:
                tls.sendall(part)
        except OSError:
            pass  # the proxy answered and closed while the rest was still coming: the answer is what counts
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(65536)
            if not chunk:
                break
            data += chunk
        header_block, _, body = data.partition(b"\r\n\r\n")
        lines = header_block.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = tls.recv(65536)
            if not chunk:
                break
            body += chunk
    return Answer(int(lines[0].split()[1]), headers, body[:length])


def request(port: int, ca: Path, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
            **kwargs: float) -> Answer:
    fields = {"Host": "localhost", "Connection": "close", **(headers or {})}
    if body or method == "POST":
        fields.setdefault("Content-Length", str(len(body)))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return send_raw(port, ca, head.encode(), [body] if body else [], **kwargs)


def nested_json(total_bytes: int) -> bytes:
    """qa/L0_http/nested_json_crash.py's body: arrays nested total_bytes/2 deep (2.51 crashes from ~120 kB)."""
    depth = total_bytes // 2
    return b"[" * depth + b"]" * depth


def infer_header(**extra: object) -> dict[str, object]:
    """The JSON header a real binary request of this project sends, with ``extra`` fields replacing its own."""
    header: dict[str, object] = {
        "inputs": [{"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}],
        "outputs": [{"name": n, "parameters": {"binary_data": True}}
                    for n in ("num_detections", "detection_boxes", "detection_scores", "detection_classes")],
    }
    header.update(extra)
    return header


def binary_infer(port: int, ca: Path, header: dict[str, object] | bytes, data: bytes = b"\x04\0\0\0\xff\xd8\xff\xe0",
                 path: str = f"/v2/models/{MODEL}/infer") -> Answer:
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return request(port, ca, "POST", path, text + data,
                   {"Inference-Header-Content-Length": str(len(text)), "Content-Type": "application/octet-stream"})


def chunked_flood(port: int, ca: Path, chunks: int = 100_000) -> Answer:
    """qa/L0_http/http_request_many_chunks.py: one-byte chunks (2.51 allocates per chunk without a cap)."""
    head = (f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n").encode()
    return send_raw(port, ca, head, [b"1\r\n{\r\n" * chunks, b"0\r\n\r\n"])


def compressed(body: bytes, coding: str) -> bytes:
    """The body as Triton inflates it (HTTP Content-Encoding gzip or deflate): 300 kB of brackets in about 1 kB."""
    import gzip
    import zlib

    return gzip.compress(body) if coding == "gzip" else zlib.compress(body)


def many_outputs(count: int) -> dict[str, object]:
    """CVE-2026-24146: a request naming far more outputs than the model has."""
    return infer_header(outputs=[{"name": "num_detections"} for _ in range(count)])


# (name, request) pairs the proxy must refuse with a 4xx before Triton reads them; each returns the answer.
Reproducer = tuple[str, Callable[[int, Path], Answer]]


def reproducers() -> list[Reproducer]:
    big = screening.MAX_INFER_JSON_BYTES + 1
    return [
        *[(f"nested JSON {size // 1000} kB", lambda p, c, size=size: request(p, c, "POST", f"/v2/models/{MODEL}/infer",
                                                                             nested_json(size)))
          for size in (big + 1, 40_000, 120_000, 300_000)],
        ("nested JSON in a binary header", lambda p, c: binary_infer(p, c, nested_json(big + 1))),
        ("nested JSON to another model", lambda p, c: request(p, c, "POST", "/v2/models/yolo_preprocess/infer",
                                                              nested_json(120_000))),
        ("header length over the cap", lambda p, c: request(p, c, "POST", f"/v2/models/{MODEL}/infer", b"x" * 64,
                                                            {"Inference-Header-Content-Length": str(big)})),
        ("header length negative", lambda p, c: request(p, c, "POST", f"/v2/models/{MODEL}/infer", b"x" * 64,
                                                        {"Inference-Header-Content-Length": "-1"})),
        ("chunked flood", chunked_flood),
        *[(f"{coding} nested JSON 300 kB", lambda p, c, coding=coding: request(
            p, c, "POST", f"/v2/models/{MODEL}/infer", compressed(nested_json(300_000), coding),
            {"Content-Encoding": coding})) for coding in ("gzip", "deflate")],
        ("10,000 requested outputs", lambda p, c: binary_infer(p, c, many_outputs(10_000))),
        ("oversized header line", lambda p, c: request(p, c, "GET", "/v2/health/ready", headers={"X-Pad": "a" * 9000})),
        ("40 kB of header lines", lambda p, c: request(p, c, "GET", "/v2/health/ready",
                                                      headers={f"X-Pad-{i}": "a" * 1000 for i in range(40)})),
        ("repository index", lambda p, c: request(p, c, "POST", "/v2/repository/index", b"{}")),
        ("model unload", lambda p, c: request(p, c, "POST", f"/v2/repository/models/{MODEL}/unload", b"{}")),
        ("logging settings", lambda p, c: request(p, c, "POST", "/v2/logging", b'{"log_verbose_level":9}')),
        ("trace settings", lambda p, c: request(p, c, "GET", "/v2/trace/setting")),
        ("statistics", lambda p, c: request(p, c, "GET", f"/v2/models/{MODEL}/stats")),
        ("system shared memory", lambda p, c: request(p, c, "POST", "/v2/systemsharedmemory/region/x/register",
                                                      b'{"key":"/dev/shm/x","offset":0,"byte_size":1}')),
        ("CUDA shared memory", lambda p, c: request(p, c, "GET", "/v2/cudasharedmemory/status")),
        ("SageMaker route", lambda p, c: request(p, c, "POST", "/invocations", b"{}")),
        ("Vertex AI route", lambda p, c: request(p, c, "POST", "/v1/models/yolo:predict", b"{}")),
        ("statistics, percent-encoded", lambda p, c: request(p, c, "GET", f"/v2/models/{MODEL}/%73tats")),
        ("repository index, dot segments", lambda p, c: request(p, c, "POST", "/v2/health/../repository/index", b"{}")),
        ("unload, encoded slash", lambda p, c: request(p, c, "POST", f"/v2/repository%2Fmodels/{MODEL}/unload", b"{}")),
        ("infer by GET", lambda p, c: request(p, c, "GET", f"/v2/models/{MODEL}/infer")),
    ]


def refused_grpc(port: int, ca: Path) -> dict[str, str]:
    """The admin, repository, statistics, trace, logging and shared-memory RPCs: method -> gRPC status."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"localhost:{port}", ssl=True, root_certificates=str(ca))
    calls: dict[str, Callable[[], object]] = {
        "RepositoryIndex": client.get_model_repository_index,
        "RepositoryModelUnload": lambda: client.unload_model(MODEL),
        "ModelStatistics": lambda: client.get_inference_statistics(MODEL),
        "LogSettings": client.get_log_settings,
        "TraceSetting": client.get_trace_settings,
        "SystemSharedMemoryStatus": client.get_system_shared_memory_status,
        "CudaSharedMemoryStatus": client.get_cuda_shared_memory_status,
    }
    statuses = {}
    try:
        for name, call in calls.items():
            try:
                call()
                statuses[name] = "OK"
            except InferenceServerException as exc:
                statuses[name] = f"{exc.status()}: {exc.message()}"
    finally:
        client.close()
    return statuses


def grpc_infer(port: int, ca: Path, shape: tuple[int, ...] = (1, 1), outputs: int = 4,
               data: bytes = b"\x04\0\0\0\xff\xd8\xff\xe0") -> str:
    """A raw ModelInfer (no client library to tidy it up): the gRPC status name and message."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=list(shape))
    for _ in range(outputs):
        request.outputs.add(name="num_detections")
    request.raw_input_contents.append(data)  # BYTES: 4-byte length, then the bytes
    channel = grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(ca.read_bytes()))
    try:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        return "OK"
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    finally:
        channel.close()
