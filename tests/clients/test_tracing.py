"""The clients' trace context: a CLIENT span per request and its W3C traceparent, only when it is sampled."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from clients.tracing import request_span


def test_sampled_span_sends_its_own_traceparent() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    parent = provider.get_tracer("app").start_span("handle frame")
    with trace.use_span(parent), request_span("yolo", "127.0.0.1:8001", "grpc", 2, provider) as headers:
        pass
    parent.end()
    (span, _) = exporter.get_finished_spans()
    context = span.get_span_context()
    assert context is not None
    # The flags are the span's: sampled, and since OpenTelemetry 1.4x also W3C level 2's "random trace id" (03).
    assert headers["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert context.trace_flags.sampled
    assert span.name == "infer yolo" and span.kind == trace.SpanKind.CLIENT
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.attributes is not None and span.attributes["triton.images"] == 2


def test_no_sdk_or_an_unsampled_span_sends_nothing() -> None:
    with request_span("yolo", "h:1", "http", 1, trace.NoOpTracerProvider()) as headers:
        assert headers == {}
    with request_span("yolo", "h:1", "http", 1, TracerProvider(sampler=ALWAYS_OFF)) as headers:
        assert headers == {}  # Triton 2.51 would trace every request with a valid traceparent, sampled or not
