"""``python -m generator selftest``: refuses clearly where the GPU path cannot run; its serving and
comparison half runs here against a real Triton (the embedded one, serving an ONNX Runtime detector)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.cli import main
from generator.demo import DEMO_ONNX
from generator.operate.selftest import (
    ExternalServer,
    find_tritonserver,
    prerequisites,
    serve_and_compare,
)
from generator.repository.host import query_gpus, tensorrt_problem
from generator.server.embedded import EmbeddedServer, ensure_server

GPU_HOST = tensorrt_problem() is None and query_gpus()[3] is None


@pytest.mark.skipif(GPU_HOST, reason="this machine has TensorRT and a GPU")
def test_without_tensorrt_it_says_what_is_missing_and_exits_1(tmp_path: Path, capsys) -> None:
    assert main(["selftest", "--workdir", str(tmp_path / "work")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the selftest needs TensorRT, an NVIDIA GPU and Triton")
    assert tensorrt_problem() in err
    assert "no NVIDIA GPU is visible" in err
    assert not (tmp_path / "work").exists()  # nothing was built


def test_a_tritonserver_without_the_tensorrt_backend_is_named(tmp_path: Path) -> None:
    embedded = ensure_server().binary  # the pytriton server: Python backend only
    assert find_tritonserver(embedded) == embedded
    assert any(f"{embedded} has no backends/tensorrt next to it" in p for p in prerequisites(embedded))
    assert find_tritonserver(tmp_path / "missing") is None
    assert any("no tritonserver with the TensorRT backend" in p for p in prerequisites(None))


@pytest.mark.integration
@pytest.mark.slow
def test_serve_and_compare_against_a_real_triton(tmp_path: Path) -> None:
    repository = build_repository(DEMO_ONNX, tmp_path / "repo", BuildOptions()).output
    install = ensure_server()
    server = ExternalServer(install.binary, repository, tmp_path / "tritonserver.log",
                            (f"--backend-directory={install.backends}",),
                            EmbeddedServer(repository).environment(install))
    verdict = serve_and_compare(server, DEMO_ONNX, "yolo", "fp32", images=16, ready_timeout_s=180)
    assert verdict.passed, verdict.summary()
    assert verdict.images == 16 and abs(verdict.drop_points) < 0.01  # the same FP32 graph on both sides
    assert verdict.summary().startswith("selftest PASSED: served mAP@0.5:0.95")
    assert server.process is not None and server.process.poll() is not None  # stopped afterwards

