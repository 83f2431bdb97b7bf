"""W3C trace context on every inference request, so one trace shows the caller, the ensemble and each step.

The clients use the OpenTelemetry API only; the application chooses the SDK and the exporter. Each inference
request (retries included) runs in a CLIENT span ``infer <model>`` under the caller's current span, and that
span's ``traceparent`` (and ``tracestate``) travel with the request: HTTP headers, gRPC metadata. Triton
started with ``generator serve --trace-otlp`` continues the trace: its spans for the request, the ensemble and
each composing model become children of the client's span.

Without an SDK the API's spans do nothing and no header is sent. An unsampled span sends none either: Triton
2.51 traces every request that carries a valid ``traceparent``, sampled or not, which would trace them all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Triton reads W3C trace context whatever propagator the application installed globally.
_W3C = TraceContextTextMapPropagator()
INSTRUMENTATION_NAME = "triton-detection-ensemble.clients"


@contextmanager
def request_span(
    model: str, server: str, protocol: str, images: int, provider: trace.TracerProvider | None = None
) -> Iterator[dict[str, str]]:
    """A CLIENT span around one inference request; yields the trace headers to send with it."""
    tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=provider)
    attributes: dict[str, str | int] = {"rpc.system": protocol, "server.address": server, "triton.model_name": model,
                  "triton.images": images}
    with tracer.start_as_current_span(f"infer {model}", kind=trace.SpanKind.CLIENT, attributes=attributes) as span:
        headers: dict[str, str] = {}
        if span.get_span_context().trace_flags.sampled:
            _W3C.inject(headers)
        yield headers
