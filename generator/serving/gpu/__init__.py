"""GPU preprocessing: nvImageCodec batch decode and a CuPy letterbox producing the CPU path's exact tensor.

``GpuPreprocessor(target, limits, reduced_decode).prepare_batch(encoded)`` is the GPU ``prepare_batch``:
it returns a ``GpuPreparedBatch`` whose ``images`` is a CuPy uint8 [M, H, W, 3] BGR array (hand it to the
detector through DLPack), with ``letterbox``, ``index`` and ``errors`` as the CPU path returns them.
CuPy and nvImageCodec are imported only when a ``GpuPreprocessor`` is created (``GpuUnavailableError`` says
what is missing); ``routing``, ``geometry`` and ``batch.triage`` are pure and run anywhere. The names below load
on first use, so ``environment`` (what ``generator check`` imports, standard library only) pulls in nothing else.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "DecoderOptions": ".decode",
    "GpuPreparedBatch": ".batch",
    "GpuPreprocessor": ".batch",
    "GpuUnavailableError": ".runtime",
    "batch_to_host": ".batch",
    "to_float_nchw": ".batch",
    "triage": ".batch",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name], __name__), name)
