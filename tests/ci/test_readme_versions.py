"""The README's "Pinned versions and why" table says what the project really pins.

Every row's backticked pins must equal what pyproject.toml, the lock files of the embedded server's
environments, generator/server/embedded.py and deploy/settings.py hold; a row without a source here, or a
source without a row, fails too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.settings import Settings
from generator.builder.spec.options import TensorRTOptions
from generator.server.embedded import PYTRITON_VERSION, STUB_PYTHONS, TRITON_VERSION
from generator.server.environments import LOCKS

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SECTION = "## Pinned versions and why"


def table() -> dict[str, set[str]]:
    """component -> the backticked strings of its "pinned" cell."""
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no '{SECTION}' section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| component")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return {row[0]: set(re.findall(r"`([^`]+)`", row[1])) for row in cells}


def extra(package: str, *extras: str) -> set[str]:
    """The requirement strings for ``package`` in these extras, as pyproject.toml writes them."""
    found = set()
    for name in extras:
        for requirement in PROJECT["optional-dependencies"][name]:
            if re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower() == package:
                found.add(requirement)
    assert found, f"pyproject.toml pins no {package} in {extras}"
    return found


def lock(package: str, *names: str) -> set[str]:
    """``package==version`` for every version the lock files pin."""
    found = {f"{package}=={v}" for n in names
             for v in re.findall(rf"^{re.escape(package)}==(\S+)", (LOCKS / f"{n}.txt").read_text(), re.MULTILINE)}
    assert found, f"the locks {names} pin no {package}"
    return found


def ngc_onnxruntime() -> set[str]:
    """The ONNX Runtime of the NGC image the project targets, as the INT8 step records it."""
    step = (ROOT / "generator/builder/stages/precision/stage.py").read_text()
    found = set(re.findall(rf"(\d+\.\d+) in {re.escape(Settings().triton_release)}", step))
    assert len(found) == 1, f"step.py names no single ONNX Runtime for NGC {Settings().triton_release}"
    return found


def pythons() -> set[str]:
    floor = PROJECT["requires-python"]
    low = tuple(int(p) for p in floor.removeprefix(">=").split("."))
    stubs = {v for v in STUB_PYTHONS if tuple(int(p) for p in v.split(".")) >= low}
    return {floor, *stubs, Settings().python_image.split("@")[0]}


def ngc_triton() -> set[str]:
    images = {Settings().triton_base_image, TensorRTOptions().triton_image}
    assert len(images) == 1, f"deploy and --triton-image disagree: {images}"
    return images


SOURCES: dict[str, Callable[[], set[str]]] = {
    "Embedded Triton": lambda: {TRITON_VERSION, f"nvidia-pytriton=={PYTRITON_VERSION}"},
    "NGC Triton image": ngc_triton,
    "NGC TensorRT image": lambda: {Settings().tensorrt_base_image},
    "Debian base of the CPU images": lambda: {Settings().debian_image.split("@")[0]},
    "tritonclient": lambda: extra("tritonclient", "build", "client"),
    "perf_analyzer, 2.51 config schema": lambda: lock("tritonclient", "perf-analyzer") | lock("nvidia-cuda-runtime-cu12", "perf-analyzer"),
    "numpy, yours": lambda: extra("numpy", "build", "client"),
    "numpy, embedded stubs": lambda: lock("numpy", "stub-cpu", "stub-gpu"),
    "numpy, NGC image": lambda: extra("numpy", "serve"),
    "OpenCV, yours": lambda: extra("opencv-python-headless", "build", "client"),
    "OpenCV, embedded stubs": lambda: lock("opencv-python-headless", "stub-cpu", "stub-gpu"),
    "OpenCV, NGC image": lambda: extra("opencv-python-headless", "serve"),
    "ONNX Runtime, yours": lambda: extra("onnxruntime", "build"),
    "ONNX Runtime, embedded stubs": lambda: lock("onnxruntime", "stub-cpu") | lock("onnxruntime-gpu", "stub-gpu"),
    "ONNX Runtime, NGC image": ngc_onnxruntime,
    "OpenVINO, embedded stubs": lambda: lock("openvino", "stub-openvino") | extra("openvino", "openvino"),
    "CuPy": lambda: lock("cupy-cuda13x", "stub-gpu") | extra("cupy-cuda13x", "gpu"),
    "nvImageCodec": lambda: lock("nvidia-nvimgcodec-cu13", "stub-gpu") | extra("nvidia-nvimgcodec-cu13", "gpu"),
    "onnx": lambda: extra("onnx", "build"),
    "Locust": lambda: extra("locust", "loadtest"),
    "Ultralytics": lambda: extra("ultralytics", "reference"),
    "PyAV": lambda: extra("av", "client"),
    "OpenTelemetry": lambda: (extra("opentelemetry-api", "client") | extra("opentelemetry-sdk", "dev")
                              | extra("opentelemetry-proto", "dev")
                              | extra("opentelemetry-exporter-otlp-proto-http", "dev")),
    "Python": pythons,
}


def test_the_table_has_a_row_for_every_pinned_component() -> None:
    assert set(table()) == set(SOURCES)


@pytest.mark.parametrize("component", sorted(SOURCES))
def test_the_table_says_what_the_project_pins(component: str) -> None:
    assert table().get(component) == SOURCES[component](), f"README 'Pinned versions and why', row {component!r}"


def test_the_table_says_where_the_embedded_server_belongs() -> None:
    section = (ROOT / "README.md").read_text().split(SECTION, 1)[1]
    assert ("The embedded Triton 2.51 is for development, CI, GPU hosts without Docker and the CPU stack's slim "
            "image." in section.replace("\n", " "))
    assert "lacks the 2025-26\nPython-backend security" in section
    assert "Production on GPUs runs the pinned NGC image" in section
