"""A real shared library that exports TensorRT's ``getInferLibVersion``, built with gcc for the tests.

It stands where the Triton image's libnvinfer would: the code under test finds it on disk and asks it
for its version through ctypes, exactly as it asks the real one.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def build_libnvinfer(directory: Path, version: int, soname: str = "libnvinfer.so.10") -> Path:
    """Compile ``directory/soname`` whose getInferLibVersion() returns ``version`` (e.g. 100300)."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the stand-in libnvinfer (apt-get install gcc)")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"{soname}.c"
    source.write_text(f"int getInferLibVersion(void) {{ return {version}; }}\n")
    library = directory / soname
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(library), str(source)],
                   check=True, capture_output=True)
    return library


def fake_nvidia_smi(directory: Path, name: str = "NVIDIA H100 80GB HBM3", capability: str = "9.0") -> Path:
    """An ``nvidia-smi`` that answers the GPU query the way the real one does (CSV, no header)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\necho '{name}, {capability}, 560.35.03'\n")
    script.chmod(0o755)
    return script
