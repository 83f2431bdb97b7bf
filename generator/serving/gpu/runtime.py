"""Lazy imports of the GPU libraries, with an error that says what to install.

Nothing in this package imports CuPy or nvImageCodec at module level: the pure parts (routing, geometry,
batch triage) run and are tested on machines without a GPU.
"""

from __future__ import annotations

from types import ModuleType

INSTALL_HINT = (
    "install them on the GPU host: pip install 'cupy-cuda12x' 'nvidia-nvimgcodec-cu12[nvjpeg]' "
    "(or the -cuda13x / -cu13 builds to match the driver's CUDA), or serve with the CPU preprocess"
)


class GpuUnavailableError(RuntimeError):
    """The GPU preprocess cannot run here: a library or the GPU itself is missing. Safe to show to a user."""


def import_cupy() -> ModuleType:
    try:
        import cupy
    except ImportError as exc:  # also raised by CuPy when its CUDA libraries are missing
        raise GpuUnavailableError(f"the GPU preprocess needs CuPy, which did not import ({exc}); {INSTALL_HINT}") from exc
    return cupy


def import_nvimgcodec() -> ModuleType:
    try:
        from nvidia import nvimgcodec
    except ImportError as exc:
        raise GpuUnavailableError(
            f"the GPU preprocess needs nvImageCodec, which did not import ({exc}); {INSTALL_HINT}"
        ) from exc
    return nvimgcodec
