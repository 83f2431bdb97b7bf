"""`serve` flags; the command itself runs a real server in tests/integration/test_serve.py."""

from __future__ import annotations

from pathlib import Path

import pytest


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


def test_the_cuda_pool_flag_reaches_triton_only_for_gpu_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from generator.cli.serve import add_arguments, pool_args
    from generator.errors import ServerError

    def repository(name: str, kind: str) -> Path:
        (tmp_path / name / "pre").mkdir(parents=True)
        (tmp_path / name / "pre" / "config.pbtxt").write_text(
            f'name: "pre"\nbackend: "python"\ninstance_group [ {{ count: 1, kind: {kind} }} ]\n')
        return tmp_path / name

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    gpu, cpu = repository("gpu", "KIND_GPU"), repository("cpu", "KIND_CPU")
    assert pool_args(parser.parse_args([]), [gpu]) == ["--cuda-memory-pool-byte-size=0:2147483648"]
    assert pool_args(parser.parse_args(["--cuda-pool-mib", "256"]), [cpu, gpu]) == [
        "--cuda-memory-pool-byte-size=0:268435456"]
    assert pool_args(parser.parse_args(["--cuda-pool-mib", "0"]), [gpu]) == []
    assert pool_args(parser.parse_args([]), [cpu]) == []
    with pytest.raises(ServerError, match="cannot be negative"):
        pool_args(parser.parse_args(["--cuda-pool-mib", "-1"]), [gpu])
