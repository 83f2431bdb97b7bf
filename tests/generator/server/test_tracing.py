"""Triton's OpenTelemetry flags: validated before a server is started with them (a bad one stops it)."""

from __future__ import annotations

import pytest

from generator.server.tracing import TraceSettings, TraceSettingsError, otlp_traces_url


def test_flags_follow_triton_trace_config_form() -> None:
    flags = TraceSettings("https://otel.example:4318/v1/traces", rate=100, service_name="yolo-prod",
                          export_delay_ms=1000).server_args()
    assert flags == [
        "--trace-config=mode=opentelemetry",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=100",
        "--trace-config=count=-1",
        "--trace-config=opentelemetry,url=https://otel.example:4318/v1/traces",
        "--trace-config=opentelemetry,resource=service.name=yolo-prod",
        "--trace-config=opentelemetry,bsp_schedule_delay=1000",
    ]


@pytest.mark.parametrize(("given", "used"), [
    ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
    ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
    ("http://collector/custom/path", "http://collector/custom/path"),
])
def test_a_url_without_a_path_gets_the_otlp_traces_path(given: str, used: str) -> None:
    assert otlp_traces_url(given) == used


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "grpc://collector:4317"}, "http:// or https://"),
    ({"url": "http://"}, "http:// or https://"),
    ({"url": "http://a:1/x,y"}, "commas or spaces"),
    ({"url": "http://a:1", "rate": -1}, "trace rate"),
    ({"url": "http://a:1", "service_name": "two words"}, "service name"),
    ({"url": "http://a:1", "export_delay_ms": 0}, "export delay"),
])
def test_settings_triton_would_refuse_are_refused_here(kwargs: dict, message: str) -> None:
    with pytest.raises(TraceSettingsError, match=message):
        TraceSettings(**kwargs)
