"""GPU preprocessing: nvImageCodec batch decode and a CuPy letterbox producing the CPU path's exact tensor.

``GpuPreprocessor(target, limits, reduced_decode).prepare_batch(encoded)`` is the GPU ``prepare_batch``:
it returns a ``GpuPreparedBatch`` whose ``images`` is a CuPy uint8 [M, H, W, 3] BGR array (hand it to the
detector through DLPack), with ``letterbox``, ``index`` and ``errors`` as the CPU path returns them.
CuPy and nvImageCodec are imported only when a ``GpuPreprocessor`` is created (``GpuUnavailableError`` says
what is missing); ``routing``, ``geometry`` and ``batch.triage`` are pure and run anywhere.
"""

from .batch import GpuPreparedBatch, GpuPreprocessor, to_float_nchw, triage
from .decode import DecoderOptions
from .runtime import GpuUnavailableError

__all__ = ["DecoderOptions", "GpuPreparedBatch", "GpuPreprocessor", "GpuUnavailableError", "to_float_nchw", "triage"]
