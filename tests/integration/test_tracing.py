"""One trace from the client through the ensemble and each step, received by a real OTLP receiver.

A server started with the flags ``generator serve --trace-otlp`` gives (generator/server/tracing.py) exports
its spans to a receiver this test runs (tests/integration/otlp_receiver.py); the clients, sync and async,
over gRPC and HTTP, export theirs there too through the OpenTelemetry SDK's OTLP/HTTP exporter. Asserted: the
client span is the parent of Triton's request span, which holds the ensemble span, which holds one span per
composing model, each with its compute span; and a request without trace context is not traced (rate 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from clients import AsyncDetectionClient, DetectionClient
from generator.server.embedded import EmbeddedServer
from generator.server.hardening import admin_access
from generator.server.ports import free_port
from generator.server.tracing import TraceSettings
from tests.integration.helpers import infer, scene_bytes
from tests.integration.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver

pytestmark = pytest.mark.integration

STEPS = ("yolo_preprocess", "yolo_detector", "yolo_nms")


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, demo_repository: Path) -> Iterator[tuple[EmbeddedServer,
                                                                                            OtlpReceiver]]:
    """The demo ensemble on a restricted server that traces only requests carrying a traceparent."""
    log = tmp_path_factory.mktemp("traced") / "tritonserver.log"
    with otlp_receiver() as receiver:
        settings = TraceSettings(receiver.url, rate=0, export_delay_ms=200)
        server = EmbeddedServer(demo_repository, free_port(), free_port(), free_port(), log_file=log,
                                extra_args=tuple(settings.server_args()), admin=admin_access(environ={}))
        try:
            server.start()
            server.wait_ready(180)
            yield server, receiver
        except Exception:
            print(log.read_text()[-4000:] if log.exists() else "no server log")
            raise
        finally:
            server.stop()


def client_provider(receiver: OtlpReceiver) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "detection-client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url)))
    return provider


def trace_of(spans: list[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def assert_one_trace(receiver: OtlpReceiver, client_span: ReceivedSpan) -> None:
    """client -> InferRequest -> yolo -> each step -> compute, all linked by parent ids."""
    spans = receiver.wait_for(lambda got: sum(s.name == "compute" for s in trace_of(got, client_span.trace_id)) >= 3)
    spans = trace_of(spans, client_span.trace_id)
    by_parent: dict[str, list[ReceivedSpan]] = {}
    for span in spans:
        by_parent.setdefault(span.parent_id, []).append(span)
    (request,) = by_parent[client_span.span_id]
    assert request.name == "InferRequest" and request.service == "triton-inference-server"
    (ensemble,) = by_parent[request.span_id]
    assert ensemble.name == "yolo" and ensemble.attributes["triton.model_version"] == 1
    assert "QUEUE_START" in ensemble.events
    steps = {s.name: s for s in by_parent[ensemble.span_id]}
    assert sorted(steps) == sorted(STEPS)
    for step in steps.values():
        (compute,) = by_parent[step.span_id]
        assert compute.name == "compute" and "COMPUTE_END" in compute.events
    assert len(spans) == 1 + 1 + 1 + 2 * len(STEPS)


def the_client_span(receiver: OtlpReceiver, known: set[str]) -> ReceivedSpan:
    spans = receiver.wait_for(lambda got: any(s.kind == "client" and s.span_id not in known for s in got))
    (span,) = [s for s in spans if s.kind == "client" and s.span_id not in known]
    assert span.name == "infer yolo" and span.service == "detection-client"
    return span


# Triton 2.51 reads the gRPC `traceparent` metadata value as a NUL-terminated C string (GrpcServerCarrier::Get in
# src/grpc/infer_handler.h returns the grpc::string_ref's data(), which is not terminated): when other bytes follow
# the value in gRPC's buffer, the value read is longer than W3C's 55 characters, OpenTelemetry's parser rejects it,
# and at rate 0 the request is not traced at all. Whether bytes follow depends on the server's buffers (more often
# after earlier gRPC requests), not on the client, and the same code is in Triton's main branch (2.73): nothing on
# this side makes it deterministic. Not strict, so CI shows XFAIL or XPASS; docs/OPERATING.md tells users.
GRPC_CONTEXT = pytest.mark.xfail(
    reason="Triton 2.51 reads the gRPC traceparent metadata past its end (GrpcServerCarrier::Get, "
           "src/grpc/infer_handler.h): the propagated context is intermittently rejected", strict=False)


@pytest.mark.parametrize("protocol", [pytest.param("grpc", marks=GRPC_CONTEXT), "http"])
def test_sync_client_trace_runs_through_the_ensemble_and_each_step(traced, protocol: str) -> None:
    server, receiver = traced
    known = {s.span_id for s in receiver.spans}
    provider = client_provider(receiver)
    url = f"grpc://{server.grpc_url}" if protocol == "grpc" else f"http://{server.http_url}"
    try:
        with DetectionClient(url, model="yolo", tracer_provider=provider) as client:
            assert client.detect(scene_bytes(11, 640, 480)).detections
    finally:
        provider.shutdown()
    assert_one_trace(receiver, the_client_span(receiver, known))


@pytest.mark.parametrize("protocol", [pytest.param("grpc", marks=GRPC_CONTEXT), "http"])
def test_async_client_trace_runs_through_the_ensemble_and_each_step(traced, protocol: str) -> None:
    server, receiver = traced
    known = {s.span_id for s in receiver.spans}
    provider = client_provider(receiver)
    url = f"grpc://{server.grpc_url}" if protocol == "grpc" else f"http://{server.http_url}"

    async def detect() -> None:
        async with AsyncDetectionClient(url, model="yolo", tracer_provider=provider) as client:
            assert (await client.detect(scene_bytes(12, 640, 480))).detections

    try:
        asyncio.run(detect())
    finally:
        provider.shutdown()
    assert_one_trace(receiver, the_client_span(receiver, known))


def test_without_a_trace_context_rate_zero_traces_nothing(traced) -> None:
    server, receiver = traced
    before = len(receiver.spans)

    class Plain:  # test_ensemble.infer's view of a server
        grpc_url, http_url = server.grpc_url, server.http_url

    for protocol in ("grpc", "http"):
        assert infer(Plain, "yolo", [scene_bytes(13, 320, 240)], protocol)["num_detections"][0, 0] > 0
    # A traced request afterwards arrives, so the plain ones had their chance to be exported before it. Over HTTP:
    # a traced gRPC request intermittently loses its context in Triton (GRPC_CONTEXT), and this test is about the
    # plain requests.
    provider = client_provider(receiver)
    try:
        with DetectionClient(f"http://{server.http_url}", model="yolo", tracer_provider=provider) as client:
            client.detect(scene_bytes(14, 320, 240))
    finally:
        provider.shutdown()
    spans = receiver.wait_for(lambda got: sum(s.name == "compute" for s in got[before:]) >= 3)[before:]
    requests = [s for s in spans if s.name == "InferRequest"]
    clients = {s.span_id for s in spans if s.kind == "client"}
    assert len(requests) == 1 and requests[0].parent_id in clients


def test_serve_with_trace_otlp_traces_one_request_in_rate(demo_repository: Path, tmp_path: Path) -> None:
    """`python -m generator serve --trace-otlp URL --trace-rate 1`: Triton 2.51 takes the flags and traces a
    request that carries no context as a trace of its own (the watchdog's probes are requests too)."""
    from tests.integration.serve_process import ServeProcess

    with otlp_receiver() as receiver:
        serve = ServeProcess([demo_repository], "--trace-otlp", receiver.url, "--trace-rate", "1",
                             log_file=tmp_path / "serve.log")
        try:
            serve.wait_for(r"^Triton 2\.51\.0 ready: ")

            class Plain:
                grpc_url, http_url = serve.grpc_url, serve.http_url

            infer(Plain, "yolo", [scene_bytes(15, 320, 240)])
            spans = receiver.wait_for(lambda got: any(s.name == "yolo_nms" for s in got), timeout_s=30)
        finally:
            assert serve.stop() == 0
    roots = {s.span_id for s in spans if s.name == "InferRequest" and s.parent_id == ""}
    ensembles = [s for s in spans if s.name == "yolo" and s.parent_id in roots]
    assert ensembles, [(s.name, s.parent_id) for s in spans]
