"""The detector on ONNX Runtime's CUDA execution provider: its settings, chosen once, and GPU input batches.

Both GPU detectors take ``SETTINGS``: the embedded one (``--target embedded --device gpu``, ``OnnxRunner``
inside the Python backend; the values travel as its config parameters) and Triton's ONNX Runtime backend in the
NGC image (``--target onnxruntime --device gpu``; the builder writes them into its config). Why each value
(measured on the lent H200 with onnxruntime-gpu 1.31.1 and cuDNN 9.14, docs/results/gpu/README.md, "GPU
detector"):

- ``cudnn_conv_algo_search`` HEURISTIC. Steady throughput equals ONNX Runtime's default, EXHAUSTIVE (demo detector
  at batch 1 / 8 / 32: 494 / 2,997 / 5,371 img/s against 327 / 3,361 / 5,340), while setting up a batch size costs
  0.13-2.4 s instead of 1.4-3.8 s; DEFAULT sets up in 0.1 s but runs 10-17x slower (29 img/s at batch 1).
  The CUDA provider pays that setup again whenever a session's batch size changes (not only the first time), so
  the embedded detector keeps one session per batch bucket (``runner.batch_buckets``).
- ``arena_extend_strategy`` kSameAsRequested. The default, kNextPowerOfTwo, rounds every growth of the device
  arena up to a power of two (measured: no faster, 0-13 % more memory per session); several detector and
  preprocess instances share one GPU.
- No ``gpu_mem_limit``: a limit below what the largest batch needs fails those batches at run time; the memory
  each instance takes is measured instead (1.6-4.7 GB per embedded detector instance, its bucket sessions included).
- CUDA graphs stay off: ONNX Runtime replays a captured graph only for the input and output addresses and the
  shapes it captured, while Triton hands every request its own buffers, and the served graphs keep 12-27 shape
  nodes on the CPU, which capture does not allow (the capture attempt crashed the process on the H200).

CuPy is imported only when a batch arrives in GPU memory (the GPU preprocess, which needs CuPy itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")  # ONNX Runtime's OrtCudnnConvAlgoSearch, in order
ARENA_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")  # its ArenaExtendStrategy, in order
# Config parameter that marks a Python-backend detector whose instances run on the GPU.
DEVICE_PARAMETER = "detector_device"


class CudaSettingsError(ValueError):
    """A CUDA provider setting is not one ONNX Runtime accepts; the message names it."""


@dataclass(frozen=True)
class CudaSettings:
    """CUDA provider options of one session; ``device_id`` is the GPU of the Triton instance."""

    device_id: int = 0
    conv_algo_search: str = "HEURISTIC"
    arena_extend_strategy: str = "kSameAsRequested"
    gpu_mem_limit: int = 0  # bytes of the provider's arena; 0: no limit

    def __post_init__(self) -> None:
        if self.conv_algo_search not in CONV_ALGO_SEARCHES:
            raise CudaSettingsError(f"cudnn_conv_algo_search must be one of {', '.join(CONV_ALGO_SEARCHES)}, "
                                    f"not {self.conv_algo_search!r}")
        if self.arena_extend_strategy not in ARENA_STRATEGIES:
            raise CudaSettingsError(f"arena_extend_strategy must be one of {', '.join(ARENA_STRATEGIES)}, "
                                    f"not {self.arena_extend_strategy!r}")
        if self.device_id < 0 or self.gpu_mem_limit < 0:
            raise CudaSettingsError("device_id and gpu_mem_limit cannot be negative")

    def parameters(self) -> dict[str, str]:
        """The options by ONNX Runtime's names (the keys of Triton's ``cuda`` execution accelerator too)."""
        values = {"cudnn_conv_algo_search": self.conv_algo_search,
                  "arena_extend_strategy": self.arena_extend_strategy}
        if self.gpu_mem_limit:
            values["gpu_mem_limit"] = str(self.gpu_mem_limit)
        return values

    def legacy_parameters(self) -> dict[str, str]:
        """The same options as Triton's ONNX Runtime backend reads them from a config's ``parameters``.

        Whenever a config has any ``parameters`` the backend reads these keys there (numeric codes) and
        resets the ones that are missing to its defaults (EXHAUSTIVE, kNextPowerOfTwo), over what its
        ``cuda`` accelerator said: onnxruntime_backend src/onnxruntime.cc, "Parse CUDA EP configurations
        directly from the parameters field".
        """
        values = {"cudnn_conv_algo_search": str(CONV_ALGO_SEARCHES.index(self.conv_algo_search)),
                  "arena_extend_strategy": str(ARENA_STRATEGIES.index(self.arena_extend_strategy))}
        if self.gpu_mem_limit:
            values["gpu_mem_limit"] = str(self.gpu_mem_limit)
        return values

    def provider_options(self) -> dict[str, str]:
        return {"device_id": str(self.device_id), **self.parameters()}

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str], device_id: int) -> CudaSettings:
        """The settings a detector config carries (``parameters()``), for the instance on ``device_id``."""
        limit = parameters.get("gpu_mem_limit", "0")
        if not limit.isdigit():
            raise CudaSettingsError(f"gpu_mem_limit must be a number of bytes, not {limit!r}")
        return cls(device_id, parameters.get("cudnn_conv_algo_search", SETTINGS.conv_algo_search),
                   parameters.get("arena_extend_strategy", SETTINGS.arena_extend_strategy), int(limit))


SETTINGS = CudaSettings()


def session_providers(cuda: CudaSettings | None) -> list[Any]:
    """ONNX Runtime providers: the CUDA provider first (nodes it lacks fall back to the CPU), or the CPU alone."""
    if cuda is None:
        return [CPU_PROVIDER]
    return [(CUDA_PROVIDER, cuda.provider_options()), CPU_PROVIDER]


def device_pointer(array: Any) -> int | None:
    """Address of a C-contiguous array in GPU memory (``__cuda_array_interface__``), None for host memory."""
    interface = getattr(array, "__cuda_array_interface__", None)
    if interface is None:
        return None
    strides = interface.get("strides")
    if strides is not None and tuple(strides) != c_strides(interface["shape"], int(interface["typestr"][2:])):
        raise ValueError("the detector binds C-contiguous GPU batches only")
    return int(interface["data"][0])


def c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def import_cupy() -> ModuleType:
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"the detector got its input in GPU memory and needs CuPy to batch it, which did not "
                           f"import ({exc}); install the gpu extra where Triton runs (pip install '.[gpu]')") from exc
    return cupy


def stack_tensors(tensors: Sequence[Any], device_id: int,
                  cupy: Callable[[], Any] = import_cupy) -> tuple[Any, list[int]]:
    """One batch of the requests' input tensors (``pb_utils.Tensor``) and each request's size.

    A lone host tensor (the CPU preprocess) stays on the host, and ONNX Runtime copies it to the GPU once. Several
    host tensors are each copied to the GPU and joined there: joining them on the host first would read and write
    the whole batch once more (39 MB at 32 images of 640x640) before that copy, the stub's single thread doing
    it. Without CuPy they are joined on the host. GPU tensors (the GPU preprocess) stay there: a lone tensor on
    this instance's GPU is read in place, several are concatenated on the GPU (a device copy of about 1.2 MB per
    640x640 image).
    """
    if all(tensor.is_cpu() for tensor in tensors):
        arrays = [tensor.as_numpy() for tensor in tensors]
        if len(arrays) == 1:
            return arrays[0], [len(arrays[0])]
        try:
            cp = cupy()
        except RuntimeError:  # no CuPy where the detector runs: one host batch, as before
            return np.concatenate(arrays), [len(a) for a in arrays]
    else:
        cp = cupy()
    with cp.cuda.Device(device_id):
        arrays = [_on_device(cp, tensor, device_id) for tensor in tensors]
        batch = arrays[0] if len(arrays) == 1 else cp.concatenate(arrays)
        batch = cp.ascontiguousarray(batch)
        # ONNX Runtime computes on its own stream: the copies above must be finished before it reads them.
        cp.cuda.get_current_stream().synchronize()
    return batch, [len(a) for a in arrays]


def _on_device(cp: Any, tensor: Any, device_id: int) -> Any:
    if tensor.is_cpu():
        return cp.asarray(tensor.as_numpy())
    array = cp.from_dlpack(tensor)
    return array if array.device.id == device_id else array.copy()  # copy() lands on the current device
