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
    DETECTOR_REQUIREMENTS,
    PROBE_MODEL,
    REQUIREMENTS,
    detector_problems,
    detector_record,
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


# --- the GPU detector (--target embedded --device gpu) -----------------------------------------------------

DETECTOR = {"detector": {"device": "gpu", "requirements": list(DETECTOR_REQUIREMENTS)}}


class FakeOnnxRuntime:
    """onnxruntime as the check sees it: its providers, and what a CUDA session turns out to run on."""

    __version__ = "1.31.1"

    def __init__(self, providers: list[str], session: list[str] | Exception) -> None:
        self.providers, self.session = providers, session

    def get_available_providers(self) -> list[str]:
        return self.providers

    def InferenceSession(self, model: bytes, providers: list[str]) -> Any:
        assert model == PROBE_MODEL and providers == ["CUDAExecutionProvider"]
        if isinstance(self.session, Exception):
            raise self.session
        return SimpleNamespace(get_providers=lambda: self.session)


def detector_importer(ort: Any, numpy: str = "1.26.4") -> Any:
    return lambda name: ort if name == "onnxruntime" else SimpleNamespace(__version__=numpy)


CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_the_detector_record_lists_onnxruntime_gpu_only_for_the_python_backend_on_a_gpu() -> None:
    assert detector_record("gpu", True) == DETECTOR["detector"]
    assert detector_record("gpu", False)["requirements"] == []  # Triton's own ONNX Runtime / TensorRT backend
    assert detector_record("cpu", True) == {"device": "cpu", "requirements": []}


def test_a_working_cuda_provider_passes() -> None:
    assert detector_problems(DETECTOR, detector_importer(FakeOnnxRuntime(CUDA, CUDA))) == []


@pytest.mark.parametrize(("ort", "numpy", "expected"), [
    (FakeOnnxRuntime(["CPUExecutionProvider"], []), "1.26.4",
     "needs ONNX Runtime's CUDA provider; onnxruntime 1.31.1 here has CPUExecutionProvider (the CPU package?)"),
    (FakeOnnxRuntime(CUDA, ["CPUExecutionProvider"]), "1.26.4",
     "could not open a session on the CUDA provider on GPU 0 (it ran on ['CPUExecutionProvider'])"),
    (FakeOnnxRuntime(CUDA, RuntimeError("CUDA failure 100: no CUDA-capable device is detected")), "1.26.4",
     "could not open a session on the CUDA provider on GPU 0: CUDA failure 100: no CUDA-capable device"),
    (FakeOnnxRuntime(CUDA, CUDA), "2.5.2", "the GPU detector needs numpy >=1.22,<2.0, this machine has 2.5.2"),
])
def test_each_detector_problem_is_one_line(ort: Any, numpy: str, expected: str) -> None:
    (problem,) = detector_problems(DETECTOR, detector_importer(ort, numpy))
    assert expected in problem


def test_onnxruntime_outside_the_proven_release_is_refused() -> None:
    ort = FakeOnnxRuntime(CUDA, CUDA)
    ort.__version__ = "1.30.0"
    (problem,) = detector_problems(DETECTOR, detector_importer(ort))
    assert "needs onnxruntime >=1.31,<1.32, this machine has 1.30.0" in problem and "onnxruntime-gpu" in problem


def test_a_cpu_detector_imports_nothing() -> None:
    def refuse(name: str) -> Any:
        raise AssertionError(f"imported {name}")
    assert detector_problems({"detector": {"device": "cpu", "requirements": []}}, refuse) == []
    assert detector_problems({"detector": {"layout": "v8"}}, refuse) == []  # built before the device was recorded


def test_the_probe_model_runs_here() -> None:
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(PROBE_MODEL, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"x": np.array([3.0], np.float32)})
    assert out.tolist() == [3.0]


def test_check_refuses_a_gpu_detector_where_onnxruntime_has_no_cuda(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    repo = tmp_path / "repo"
    build_repository(DEMO_ONNX, repo, BuildOptions(device="gpu"))
    assert main(["check", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "mismatch: the GPU detector needs ONNX Runtime's CUDA provider" in err
    assert "pip uninstall -y onnxruntime && pip install '.[gpu-detector]'" in err
    assert main(["check", "--files-only", str(repo)]) == 0
