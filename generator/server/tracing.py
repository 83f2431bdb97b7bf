"""Triton's OpenTelemetry tracing: the flags ``generator serve --trace-otlp`` and deploy give tritonserver.

Triton 2.51 (``--trace-config mode=opentelemetry``) exports spans over OTLP/HTTP (protobuf) to one URL: per
request an ``InferRequest`` span, a span per model (the ensemble, then each composing model under it) and a
``compute`` span per execution, with the TIMESTAMPS events (queue, compute input/infer/output) on them. It
reads W3C trace context (``traceparent``/``tracestate`` HTTP headers or gRPC metadata) and then traces that
request whatever the sampling rate, so a client's trace continues through the ensemble and every step.
``rate`` N traces every N-th request that carries no context; 0 traces only those that do.

The settings cannot change while Triton runs (its trace API does not cover OpenTelemetry mode), and a flag it
does not accept stops the server at start, so they are validated here and the integration test starts a real
server with them (tests/integration/test_tracing.py).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

# The OTLP/HTTP path for traces; a URL given without a path gets it (what OTEL_EXPORTER_OTLP_ENDPOINT means).
OTLP_TRACES_PATH = "/v1/traces"
DEFAULT_RATE = 1000  # Triton's own default: one request in 1000 without a trace context
DEFAULT_SERVICE = "triton-inference-server"
# Triton's batch span processor sends every 5 s by default; a shorter delay shows traces sooner.
DEFAULT_EXPORT_DELAY_MS = 5000
_SERVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class TraceSettingsError(ValueError):
    """A trace setting Triton would refuse or misread; the message names it."""


def otlp_traces_url(url: str) -> str:
    """``url`` checked (http or https, a host) and given the OTLP traces path when it has none."""
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise TraceSettingsError(f"--trace-otlp needs an http:// or https:// URL of an OTLP/HTTP receiver "
                                 f"(e.g. http://127.0.0.1:4318{OTLP_TRACES_PATH}); got {url!r}")
    if any(c in url for c in ", \t\n"):
        raise TraceSettingsError(f"the OTLP URL {url!r} must not contain commas or spaces (Triton splits its "
                                 "--trace-config values on them)")
    path = parsed.path if parsed.path not in ("", "/") else OTLP_TRACES_PATH
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, parsed.query, ""))


@dataclass(frozen=True)
class TraceSettings:
    """Where Triton sends its spans and which requests it traces."""

    url: str
    rate: int = DEFAULT_RATE
    service_name: str = DEFAULT_SERVICE
    export_delay_ms: int = DEFAULT_EXPORT_DELAY_MS

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", otlp_traces_url(self.url))
        if not 0 <= self.rate <= 2**31 - 1:
            raise TraceSettingsError(f"the trace rate must be 0 (only requests with a traceparent) or N >= 1 "
                                     f"(every N-th request), got {self.rate}")
        if not _SERVICE_RE.match(self.service_name):
            raise TraceSettingsError(f"the trace service name {self.service_name!r} must be letters, digits, "
                                     "'.', '_' or '-'")
        if not 1 <= self.export_delay_ms <= 60_000:
            raise TraceSettingsError(f"the span export delay must be 1..60000 ms, got {self.export_delay_ms}")

    def server_args(self) -> list[str]:
        """tritonserver flags, in the ``--trace-config`` form Triton 2.51 documents (trace.md)."""
        return [
            "--trace-config=mode=opentelemetry",
            # Without a level nothing is traced, and the propagated context is read only when it is set.
            "--trace-config=level=TIMESTAMPS",
            f"--trace-config=rate={self.rate}",
            "--trace-config=count=-1",
            f"--trace-config=opentelemetry,url={self.url}",
            f"--trace-config=opentelemetry,resource=service.name={self.service_name}",
            f"--trace-config=opentelemetry,bsp_schedule_delay={self.export_delay_ms}",
        ]
