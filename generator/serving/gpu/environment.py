"""What the GPU preprocess needs where Triton runs, and a check that it is there.

The build records ``REQUIREMENTS`` in the manifest (``preprocess.requirements``); deploy installs them into the
Triton image; ``python -m generator check`` calls ``manifest_problems`` so a repository whose preprocess runs
on the GPU is refused on a machine that could not load it, with one line per problem.

CuPy stays on 13.x: CuPy 14 is built for numpy 2, and the Triton 2.51 Python-backend stub needs numpy < 2
where it deserialises BYTES inputs (measured on the H200: docs/results/gpu/). The CUDA 13 builds match NGC
Triton 26.08 (CUDA 13); a CUDA 12 host takes ``cupy-cuda12x`` and ``nvidia-nvimgcodec-cu12`` instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

REQUIREMENTS = ("cupy-cuda13x>=13.6,<14", "nvidia-nvimgcodec-cu13[nvjpeg]>=0.9,<0.10")
# (module, lowest version, first version not accepted): what the serving process imports.
MODULES = (("cupy", (13, 6), (14, 0)), ("nvidia.nvimgcodec", (0, 9), (0, 10)), ("numpy", (1, 22), (2, 0)))
INSTALL = "pip install '.[gpu]' (or the packages in the manifest's preprocess.requirements)"


def record(device: str) -> dict[str, Any]:
    """The manifest's ``preprocess`` entry."""
    return {"device": device, "requirements": list(REQUIREMENTS) if device == "gpu" else []}


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def module_problems(importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """One line per missing module or version outside what the GPU preprocess runs with."""
    problems = []
    for name, low, high in MODULES:
        try:
            module = importer(name)
        except Exception as exc:  # noqa: BLE001 -- CuPy raises more than ImportError without its CUDA libraries
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no message"
            problems.append(f"the GPU preprocess needs {name}, which did not import here ({type(exc).__name__}: "
                            f"{detail}); {INSTALL}")
            continue
        found = str(getattr(module, "__version__", "0"))
        if not low <= _version(found)[: len(low)] < high:
            wanted = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
            problems.append(f"the GPU preprocess needs {name} {wanted}, this machine has {found}; {INSTALL}")
    return problems


def device_problems(importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """Empty when CuPy sees a CUDA device and nvImageCodec can create a GPU JPEG decoder on it."""
    from .decode import DecoderOptions, GpuJpegDecoder
    from .runtime import GpuUnavailableError

    cupy = importer("cupy")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 -- CUDARuntimeError when there is no driver or device
        count, reason = 0, f" ({exc})"
    else:
        reason = ""
    if count < 1:
        return [f"the GPU preprocess needs a CUDA device, CuPy sees none{reason}; serve on a GPU host "
                "(--gpus / the NVIDIA device plugin) or rebuild with --preprocess-device cpu"]
    try:
        GpuJpegDecoder(DecoderOptions())
    except GpuUnavailableError:
        try:  # what the preprocess falls back to on a GPU without a hardware JPEG engine
            GpuJpegDecoder(DecoderOptions(backend="cuda"))
        except GpuUnavailableError as exc:
            return [f"{exc}; install nvImageCodec's nvJPEG extension ({INSTALL})"]
    return []


def manifest_problems(manifest_extra: Mapping[str, Any],
                      importer: Callable[[str], Any] = importlib.import_module) -> list[str]:
    """What stops this machine from serving a repository built with ``--preprocess-device gpu``; [] otherwise."""
    entry = manifest_extra.get("preprocess") or {}
    if entry.get("device") != "gpu":
        return []
    problems = module_problems(importer)
    return problems or device_problems(importer)
