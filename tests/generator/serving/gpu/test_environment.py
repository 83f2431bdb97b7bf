"""What ``generator check`` verifies for a repository whose preprocess runs on the GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.cli import main
from generator.demo import DEMO_ONNX
from generator.serving.gpu.environment import (
    REQUIREMENTS,
    device_problems,
    manifest_problems,
    module_problems,
    record,
)

GPU = {"preprocess": {"device": "gpu", "requirements": list(REQUIREMENTS)}}


def importer(**versions: str | None) -> Any:
    """Modules by name with a __version__; None: the import fails."""
    def load(name: str) -> Any:
        version = versions.get(name.split(".")[-1])
        if version is None:
            raise ImportError(f"No module named {name!r}")
        return SimpleNamespace(__version__=version)
    return load


GOOD = {"cupy": "13.6.0", "nvimgcodec": "0.9.0", "numpy": "1.26.4"}


def test_the_record_lists_the_packages_only_for_the_gpu() -> None:
    assert record("gpu") == GPU["preprocess"]
    assert record("cpu") == {"device": "cpu", "requirements": []}


def test_matching_modules_pass() -> None:
    assert module_problems(importer(**GOOD)) == []


@pytest.mark.parametrize(("versions", "expected"), [
    ({"cupy": "14.2.0"}, "cupy >=13.6,<14.0, this machine has 14.2.0"),
    ({"cupy": "13.5.1"}, "cupy >=13.6,<14.0, this machine has 13.5.1"),
    ({"numpy": "2.5.2"}, "numpy >=1.22,<2.0, this machine has 2.5.2"),
    ({"nvimgcodec": None}, "needs nvidia.nvimgcodec, which did not import here (ImportError: No module named"),
])
def test_each_wrong_or_missing_module_is_one_line_saying_what_to_install(versions: dict, expected: str) -> None:
    (problem,) = module_problems(importer(**{**GOOD, **versions}))
    assert expected in problem and "pip install '.[gpu]'" in problem


def test_a_cpu_repository_imports_nothing() -> None:
    def refuse(name: str) -> Any:
        raise AssertionError(f"imported {name}")
    assert manifest_problems({"preprocess": {"device": "cpu"}}, refuse) == []
    assert manifest_problems({}, refuse) == []  # built before the preprocess device was recorded


def test_no_cuda_device_is_reported() -> None:
    class Runtime:
        @staticmethod
        def getDeviceCount() -> int:
            raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    cupy = SimpleNamespace(cuda=SimpleNamespace(runtime=Runtime))
    (problem,) = device_problems(lambda name: cupy)
    assert "needs a CUDA device, CuPy sees none (cudaErrorNoDevice" in problem
    assert "--preprocess-device cpu" in problem


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_check_refuses_a_gpu_repository_on_this_machine_and_files_only_skips_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    build_repository(DEMO_ONNX, repo, BuildOptions(preprocess_device="gpu"))
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "mismatch: the GPU preprocess needs cupy, which did not import here" in err
    assert main(["check", "--files-only", str(repo)]) == 0
