"""This host's TensorRT, CUDA driver and GPUs: what decides whether a built TensorRT plan loads here.

Found without heavy imports: the GPUs through ``nvidia-smi`` or the CUDA driver library, TensorRT through its
runtime library (``libnvinfer``, :mod:`generator.repository.libnvinfer`) or, where none is found, the ``tensorrt``
Python package. ``python -m generator check`` compares a manifest's plan facts with these; the builder asks the same
questions before it builds a plan.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import shutil
import subprocess
from dataclasses import dataclass

from generator.repository.libnvinfer import find_tensorrt_library


@dataclass(frozen=True)
class GpuInfo:
    """One visible NVIDIA GPU."""

    name: str
    compute_capability: str  # "8.6"


@dataclass(frozen=True)
class MachineFacts:
    """What decides whether a plan loads here (None: not present or not detectable)."""

    tensorrt_version: str | None
    cuda_version: str | None  # the CUDA version the driver supports
    driver_version: str | None
    gpus: tuple[GpuInfo, ...]
    tensorrt_source: str | None = None  # where tensorrt_version was read: a libnvinfer path or the package

    @property
    def gpu(self) -> GpuInfo | None:
        return self.gpus[0] if self.gpus else None


def tensorrt_problem() -> str | None:
    """Why ``tensorrt`` is unusable here, or None when the real package imports.

    ``tensorrt-stubs`` installs a ``tensorrt`` folder holding only ``.pyi`` files, which imports
    as an empty namespace package; that is not TensorRT.
    """
    spec = importlib.util.find_spec("tensorrt")
    if spec is None:
        return "the tensorrt Python package is not installed"
    if spec.origin is None or not spec.origin.endswith(".py"):
        return "only type stubs of tensorrt are installed (tensorrt-stubs), not TensorRT itself"
    try:
        module = importlib.import_module("tensorrt")
    except (ImportError, OSError) as exc:
        return f"tensorrt is installed but does not import ({exc})"
    if not hasattr(module, "Builder"):
        return "the installed tensorrt package has no Builder (broken install)"
    return None


def tensorrt_version() -> str | None:
    """The version of the importable TensorRT, or None."""
    if tensorrt_problem() is not None:
        return None
    module = importlib.import_module("tensorrt")
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def query_gpus() -> tuple[tuple[GpuInfo, ...], str | None, str | None, str | None]:
    """(GPUs, CUDA driver version, driver version, problem) from nvidia-smi or libcuda."""
    gpus, driver, problem_smi = _gpus_from_nvidia_smi()
    cuda = _cuda_driver_version()
    if not gpus:
        gpus, problem_lib = _gpus_from_libcuda()
        if not gpus:
            return (), cuda, driver, f"no NVIDIA GPU is visible ({problem_smi}; {problem_lib})"
    return gpus, cuda, driver, None


def machine_facts() -> MachineFacts:
    """Everything :mod:`generator.repository.check` compares a plan against, from this machine.

    The TensorRT version is the one of ``libnvinfer``, the library Triton's TensorRT backend
    deserialises plans with (Triton images have no ``tensorrt`` Python package); the Python
    package answers only where no library is found.
    """
    gpus, cuda, driver, _ = query_gpus()
    library = find_tensorrt_library()
    version: str | None
    source: str | None
    if library is not None:
        version, source = library.version, f"libnvinfer at {library.path}"
    else:
        version = tensorrt_version()
        source = "the tensorrt Python package" if version else None
    return MachineFacts(tensorrt_version=version, cuda_version=cuda, driver_version=driver, gpus=gpus,
                        tensorrt_source=source)


def _gpus_from_nvidia_smi() -> tuple[tuple[GpuInfo, ...], str | None, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return (), None, "nvidia-smi not found"
    try:
        result = subprocess.run(
            [exe, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), None, f"nvidia-smi failed: {exc}"
    if result.returncode != 0:
        return (), None, f"nvidia-smi failed: {(result.stderr or result.stdout).strip()[:200]}"
    gpus = []
    driver = None
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            gpus.append(GpuInfo(name=parts[0], compute_capability=parts[1]))
            driver = parts[2]
    return tuple(gpus), driver, "nvidia-smi lists no GPU" if not gpus else ""


def _load_libcuda() -> ctypes.CDLL | None:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _cuda_driver_version() -> str | None:
    lib = _load_libcuda()
    if lib is None:
        return None
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
        return None
    return f"{version.value // 1000}.{(version.value % 1000) // 10}"


def _gpus_from_libcuda() -> tuple[tuple[GpuInfo, ...], str]:
    lib = _load_libcuda()
    if lib is None:
        return (), "libcuda.so.1 not loadable"
    if lib.cuInit(0) != 0:
        return (), "cuInit failed (no device or driver mismatch)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return (), "cuDeviceGetCount failed"
    gpus = []
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, device)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)
        gpus.append(
            GpuInfo(
                name=name.value.decode(errors="replace"), compute_capability=f"{major.value}.{minor.value}"
            )
        )
    return tuple(gpus), "" if gpus else "the CUDA driver reports no device"
