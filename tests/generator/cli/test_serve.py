"""`serve` flags; the command itself runs a real server in tests/integration/test_serve.py."""

from __future__ import annotations


def test_trace_flags_become_triton_opentelemetry_settings() -> None:
    import argparse

    import pytest

    from generator.cli.serve import add_arguments, trace_args
    from generator.errors import ServerError

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert trace_args(parser.parse_args([])) == []
    flags = trace_args(parser.parse_args(["--trace-otlp", "http://collector:4318", "--trace-rate", "0"]))
    assert "--trace-config=mode=opentelemetry" in flags and "--trace-config=rate=0" in flags
    assert "--trace-config=opentelemetry,url=http://collector:4318/v1/traces" in flags
    with pytest.raises(ServerError, match="needs --trace-otlp"):
        trace_args(parser.parse_args(["--trace-rate", "5"]))
    with pytest.raises(ServerError, match="http:// or https://"):
        trace_args(parser.parse_args(["--trace-otlp", "collector:4318"]))
