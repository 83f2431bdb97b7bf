"""``--metrics-port``: the per-stream numbers as Prometheus metrics, read from the live counters at each scrape.

prometheus-client is imported only when asked for. Counters carry a ``stream`` label; the end-to-end latency
quantiles are gauges with a ``quantile`` label (as a Prometheus summary exposes them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from clients.errors import ClientError
from clients.stream.stats import StreamStats

PREFIX = "detection_stream"
COUNTERS = {
    "read": "frames decoded and offered to the sender",
    "skipped": "frames left out by --fps sampling",
    "sent": "frames sent to the server",
    "answered": "frames answered by the server",
    "refused": "frames the server refused under overload (back-pressure)",
    "failed": "frames whose request failed",
    "dropped": "frames replaced by a newer one before they could be sent (latest-frame-wins)",
    "decode_errors": "corrupt packets skipped by the decoder",
    "reconnects": "times the source was reopened",
}


class StreamCollector:
    """A custom collector: the streams' counters are the single source of truth, nothing is counted twice."""

    def __init__(self, streams: Callable[[], Sequence[StreamStats]]) -> None:
        self._streams = streams

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        summaries = [s.summary() for s in self._streams()]
        for key, help_text in COUNTERS.items():
            family = CounterMetricFamily(f"{PREFIX}_{key}_frames" if key not in ("decode_errors", "reconnects")
                                         else f"{PREFIX}_{key}", help_text, labels=["stream"])
            for summary in summaries:
                family.add_metric([summary["stream"]], float(summary[key]))
            yield family
        latency = GaugeMetricFamily(f"{PREFIX}_latency_seconds",
                                    "end-to-end latency, frame decoded to answer received", labels=["stream", "quantile"])
        up = GaugeMetricFamily(f"{PREFIX}_up", "1 while the source delivers frames", labels=["stream"])
        for summary in summaries:
            for quantile, key in (("0.5", "p50_ms"), ("0.95", "p95_ms")):
                if summary[key] is not None:
                    latency.add_metric([summary["stream"], quantile], summary[key] / 1000.0)
            up.add_metric([summary["stream"]], 1.0 if summary["status"] == "running" else 0.0)
        yield latency
        yield up


def serve_metrics(streams: Callable[[], Sequence[StreamStats]], port: int, host: str = "127.0.0.1") -> int:
    """Serve ``/metrics`` on ``host:port`` (0 picks a free port) in a daemon thread; return the port."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ClientError("--metrics-port needs prometheus-client: pip install 'triton-detection-ensemble[client]'") \
            from None
    registry = CollectorRegistry()
    registry.register(StreamCollector(streams))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ClientError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    return int(server.server_port)
