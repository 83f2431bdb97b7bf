"""`serve` helpers; the command itself runs a real server in tests/integration/test_serve.py."""

from __future__ import annotations

from pathlib import Path

from generator.cli.serve import find_ensembles


def _model(repository: Path, name: str, config: str) -> None:
    (repository / name).mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)


def test_find_ensembles_in_every_repository(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _model(first, "yolo", 'name: "yolo"\nplatform: "ensemble"\nmax_batch_size: 8\n')
    _model(first, "yolo_nms", 'name: "yolo_nms"\nbackend: "python"\n')
    _model(second, "other", 'name: "other"\n  platform:   "ensemble"  \n')
    _model(second, "plan", 'name: "plan"\nplatform: "tensorrt_plan"\n')
    (second / "notes").mkdir()
    assert find_ensembles([first, second]) == ["other", "yolo"]


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
