"""Triton's CUDA memory pool for a GPU preprocess: which repositories get it, how many GPUs, what Triton parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.commands import cuda_pool_args
from deploy.settings import Settings
from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.operate.serve import ServeSettings, make_server
from generator.server.cuda_pool import DEFAULT_MIB, pool_args, serve_pool_args, visible_gpus
from generator.server.embedded import EmbeddedServer, ServerInstall
from generator.server.environments import STUB_GPU
from generator.server.hardening import admin_access
from generator.server.ports import free_port

POOL_2048 = "--cuda-memory-pool-byte-size=0:2147483648"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo built twice by the project's own command: CPU preprocess (the default) and GPU preprocess."""
    root = tmp_path_factory.mktemp("cuda_pool")
    build_repository(DEMO_ONNX, root / "cpu", BuildOptions(name="pool_cpu"))
    build_repository(DEMO_ONNX, root / "gpu", BuildOptions(name="pool_gpu", preprocess_device="gpu"))
    return {"cpu": root / "cpu", "gpu": root / "gpu"}


def test_a_gpu_preprocess_gets_the_pool_on_every_visible_gpu(built: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert serve_pool_args([built["gpu"]]) == [POOL_2048]
    assert serve_pool_args([built["cpu"], built["gpu"]], 512) == ["--cuda-memory-pool-byte-size=0:536870912"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # Triton numbers the visible GPUs 0 and 1
    assert serve_pool_args([built["gpu"]]) == [POOL_2048, POOL_2048.replace("=0:", "=1:")]


def test_host_tensors_and_zero_leave_triton_its_own_pool(built: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert serve_pool_args([built["cpu"]]) == []
    assert serve_pool_args([built["gpu"]], 0) == []
    with pytest.raises(ValueError, match="cannot be negative"):
        pool_args(-1, 1)


def test_no_visible_gpu_gets_no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpus() == 0 and pool_args(DEFAULT_MIB, visible_gpus()) == []


def test_generator_serve_and_the_deploy_stack_size_it_alike(built: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    settings = ServeSettings([built["gpu"]], STUB_GPU, cuda_pool=tuple(serve_pool_args([built["gpu"]])))
    command = make_server(settings, admin_access(), []).command(ServerInstall(tmp_path))
    assert POOL_2048 in command
    assert cuda_pool_args(Settings(preprocess_device="gpu", gpus_per_pod=1)) == [POOL_2048]


@pytest.mark.integration
def test_triton_parses_the_pool_flag(built: dict[str, Path], tmp_path: Path) -> None:
    """Triton 2.51 here takes the flag and reports the pool it was given (a CPU-only server disables the pool)."""
    log = tmp_path / "triton.log"
    with EmbeddedServer(built["cpu"], free_port(), free_port(), free_port(), log_file=log,
                        extra_args=tuple(pool_args(DEFAULT_MIB, 1))):
        pass
    rows = [line for line in log.read_text().splitlines() if "cuda_memory_pool_byte_size" in line]
    assert rows and rows[0].split("|")[2].strip() == "2147483648", rows
