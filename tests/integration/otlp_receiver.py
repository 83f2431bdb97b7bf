"""A real OTLP/HTTP trace receiver for the tests, built on the official ``opentelemetry-proto`` messages.

The OpenTelemetry collector is a Go binary that none of the reachable package registries carries, so the
tests receive spans themselves: POST /v1/traces with an ``ExportTraceServiceRequest``, answered with an
``ExportTraceServiceResponse``, in both OTLP/HTTP encodings: JSON (what Triton 2.51's opentelemetry-cpp 1.13
exporter sends) and protobuf (the Python SDK's exporter).
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

# The span kinds of opentelemetry.proto.trace.v1.Span.SpanKind.
SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _ids_to_base64(node: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex where the protobuf JSON mapping expects base64."""
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_FIELDS and isinstance(v, str)
                    else _ids_to_base64(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_ids_to_base64(v) for v in node]
    return node


def request_from_json(body: bytes) -> ExportTraceServiceRequest:
    return json_format.ParseDict(_ids_to_base64(json.loads(body)), ExportTraceServiceRequest(),
                                 ignore_unknown_fields=True)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()


class OtlpReceiver:
    """Collects every span posted to ``url`` (``http://127.0.0.1:PORT/v1/traces``)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                content_type = self.headers.get("Content-Type", "")
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if content_type.startswith("application/x-protobuf"):
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                elif content_type.startswith("application/json"):
                    request = request_from_json(body)
                    answer = json_format.MessageToJson(ExportTraceServiceResponse()).encode()
                else:
                    self.send_error(415)
                    return
                receiver._add(request)
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(), kind=SPAN_KINDS[span.kind],
                        service=str(resource.get("service.name", "")),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=tuple(e.name for e in span.events)))
        with self._lock:
            self.requests += 1
            self.spans.extend(received)

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 20.0) -> list[ReceivedSpan]:
        """The spans received once ``done(spans)`` holds; the spans so far after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver._thread.start()
    try:
        yield receiver
    finally:
        receiver._server.shutdown()
        receiver._server.server_close()
