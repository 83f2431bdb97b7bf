"""Run an ONNX detector with ONNX Runtime on any batch size, static-batch exports included, on the CPU or a GPU.

Ultralytics exports default to a static batch of 1 (or a fixed N); under Triton's dynamic batching the
model still receives any number of images, so batches are cut into chunks of the static size and the
last chunk is padded.

On the CUDA provider (``cuda``) every run goes through I/O binding: a batch already in GPU memory (the GPU
preprocess) is bound where it lies, a host batch is copied to the GPU once, and the outputs are computed on
the GPU and copied back to the host once each (the small head the NMS step reads). A dynamic-batch export gets
one session per batch bucket (``batch_buckets``: powers of two up to the largest batch), and every batch is
padded to its bucket: the CUDA provider spends 0.1-2.4 s on a batch size its session did not just run (measured
on the H200, docs/results/gpu/README.md, "GPU detector"), which a dynamic batcher would otherwise pay on most
batches; a session that only ever sees one shape pays it once, at load.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .cuda_provider import CUDA_PROVIDER, CudaSettings, device_pointer, session_providers
from .phases import Lap, no_lap


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity mask (``taskset``, a container's cpuset), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def session_threads(requested: int, instances: int) -> int:
    """Intra-op threads of one session: as requested (> 0), every core of this process (< 0), or this process's
    cores shared by the instances (0).

    Each detector instance is a separate process with its own session. The default two instances take every core
    each (-1): their threads do not spin, so two sessions running at once share the cores (measured, issue 27);
    more instances share them out, so that many sessions at once do not oversubscribe the machine.
    """
    if requested > 0:
        return requested
    cores = usable_cores()
    return cores if requested < 0 else max(1, cores // max(1, instances))


def step_session_threads(config: dict[str, Any], params: dict[str, str]) -> int:
    """``session_threads`` of a model step: its ``intra_op_threads`` parameter, its config's instance count."""
    instances = sum(int(group.get("count", 1)) for group in config.get("instance_group", [])) or 1
    return session_threads(int(params["intra_op_threads"]), instances)


def chunks(size: int, static_batch: int | None) -> list[tuple[int, int]]:
    """(start, stop) of each run over a batch of ``size``: one run, or runs of the static batch size."""
    if static_batch is None or static_batch == size:
        return [(0, size)]
    return [(start, min(start + static_batch, size)) for start in range(0, size, static_batch)]


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """The batch sizes GPU sessions are kept at: powers of two below ``max_batch``, and ``max_batch``."""
    sizes = []
    size = 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return (*sizes, max(1, max_batch))


def served_item(dims: Sequence[int], image_size: tuple[int, int]) -> list[int]:
    """One image's input shape as served: the config's item dims (-1 where the export leaves the spatial size
    open) with the served height and width; [H, W, 3] (uint8 BGR) or [3, H, W] (float, --normalise-in
    preprocess)."""
    item = list(dims)[-3:]
    height, width = image_size
    spatial = [height, width]
    if item[0] == 3 and item[-1] != 3:  # channels first
        return [3, *(d if d > 0 else s for d, s in zip(item[1:], spatial, strict=True))]
    return [*(d if d > 0 else s for d, s in zip(item[:2], spatial, strict=True)), 3]


def bucket_chunks(size: int, buckets: Sequence[int]) -> list[tuple[int, int, int]]:
    """(start, stop, bucket) of each run: runs of the largest bucket, then the smallest bucket holding the rest."""
    largest = max(buckets)
    plan = []
    for start in range(0, size, largest):
        stop = min(start + largest, size)
        plan.append((start, stop, min(b for b in buckets if b >= stop - start)))
    return plan


INPUT_DTYPES = {"tensor(uint8)": np.uint8, "tensor(float16)": np.float16, "tensor(float)": np.float32}


class CudaProviderError(RuntimeError):
    """The session was asked for the CUDA provider and ONNX Runtime could not create it."""


class OnnxRunner:
    """One ONNX Runtime session (one per batch bucket on the GPU). ``intra_op_threads``: that many, or one per core
    of this process's affinity (0 or less), never more than it may use; ``spin_wait``: ONNX Runtime's spinning
    workers (its default; off for the served steps); ``spin_stop`` with it: they spin only while a run lasts."""

    def __init__(self, path: str | bytes, intra_op_threads: int = 0, inter_op_threads: int = 1,
                 spin_wait: bool = False, cuda: CudaSettings | None = None, buckets: Sequence[int] = (),
                 spin_stop: bool = False) -> None:
        import onnxruntime as ort  # heavy; only the detector step needs it

        options = ort.SessionOptions()
        # Never ONNX Runtime's own default (0): it sizes the pool by the machine's physical cores and pins each
        # thread to one of them (auto_set_affinity in onnxruntime/core/session/inference_session.cc, the cores from
        # PosixEnv::GetDefaultThreadAffinities in core/platform/posix/env.cc), which overrides taskset and cpusets.
        # An explicit count sets no affinity: the threads inherit this process's mask. 0 here: one per usable core.
        options.intra_op_num_threads = intra_op_threads if intra_op_threads > 0 else usable_cores()
        options.inter_op_num_threads = inter_op_threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning worker threads burn the cores the preprocess and NMS steps need between batches;
        # ``spin_wait`` (ONNX Runtime's default) is for raw-detector references only.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        if spin_wait and spin_stop:
            # The pool stops spinning when the last concurrent Run returns: no sleeping workers between operators,
            # no burnt cores between requests (issue 35).
            options.add_session_config_entry("session.force_spinning_stop", "1")

        def session() -> Any:
            return ort.InferenceSession(path, options, providers=session_providers(cuda))

        self._session: Any = session()
        if cuda is not None and CUDA_PROVIDER not in self._session.get_providers():
            # ONNX Runtime falls back to the CPU when the provider cannot load (no GPU, missing CUDA libraries).
            raise CudaProviderError(
                f"ONNX Runtime {ort.__version__} could not create the CUDA provider on GPU {cuda.device_id} "
                f"(available: {', '.join(ort.get_available_providers())}); install onnxruntime-gpu with the CUDA "
                "and cuDNN libraries it needs where Triton runs, or rebuild with --device cpu")
        self.cuda = cuda
        self.wait_for_producer: Callable[[], None] = _synchronize_cupy
        (model_input,) = self._session.get_inputs()
        self.input_name: str = model_input.name
        self.input_type: str = model_input.type
        self.input_shape: list[Any] = list(model_input.shape)
        self.output_names: list[str] = [o.name for o in self._session.get_outputs()]
        batch_dim = model_input.shape[0]
        self.static_batch: int | None = batch_dim if isinstance(batch_dim, int) else None
        # One session per bucket (GPU, dynamic batch): each keeps one input shape for good.
        self._buckets: dict[int, Any] = {}
        if cuda is not None and self.static_batch is None and buckets:
            sizes = sorted(set(buckets))
            self._buckets = {size: self._session if i == 0 else session() for i, size in enumerate(sizes)}

    @property
    def providers(self) -> list[str]:
        return list(self._session.get_providers())

    def run(self, batch: Any, lap: Lap = no_lap) -> list[np.ndarray]:
        """Run ``batch`` (leading batch axis; on the GPU a CuPy array may be given) and return every output
        as a host array with the same leading size. ``lap`` ends the phase "run" of every chunk, and on the GPU
        "to_host" (the outputs' copy back, which waits for the run's kernels)."""
        size = len(batch)
        if self._buckets:
            plan = bucket_chunks(size, list(self._buckets))
            pieces = [[out[: stop - start] for out in self._run_chunk(padded(batch[start:stop], bucket),
                                                                      self._buckets[bucket], lap)]
                      for start, stop, bucket in plan]
        else:
            pieces = [self._run_chunk(padded(batch[start:stop], self.static_batch or stop - start), lap=lap)
                      for start, stop in chunks(size, self.static_batch)]
        if len(pieces) == 1 and len(pieces[0][0]) == size:
            return pieces[0]
        return [np.concatenate([p[i] for p in pieces])[:size] for i in range(len(self.output_names))]

    def _run_chunk(self, chunk: Any, session: Any = None, lap: Lap = no_lap) -> list[np.ndarray]:
        session = session if session is not None else self._session
        if self.cuda is None:
            outputs = list(session.run(self.output_names, {self.input_name: chunk}))
            lap("run")
            return outputs
        binding = session.io_binding()
        pointer = device_pointer(chunk)
        if pointer is None:
            binding.bind_cpu_input(self.input_name, np.ascontiguousarray(chunk))
        else:
            # ONNX Runtime computes on its own stream, which does not wait for CuPy's: the padding above (a copy
            # into a new array from CuPy's pool, which may still hold an earlier batch) must have landed first.
            self.wait_for_producer()
            binding.bind_input(self.input_name, "cuda", self.cuda.device_id, np.dtype(chunk.dtype).type,
                               list(chunk.shape), pointer)
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.cuda.device_id)
        session.run_with_iobinding(binding)
        lap("run")
        outputs = list(binding.copy_outputs_to_cpu())
        lap("to_host")
        return outputs

    def warm_up(self, batch_sizes: Sequence[int] = (1,), item_shape: Sequence[int] | None = None) -> list[int]:
        """Run a zero batch of each bucket (else each size, or the static size) so that the first requests do
        not pay for the provider's per-shape setup; returns the sizes run (none when the image size is unknown:
        a dynamic spatial size and no ``item_shape``)."""
        item = list(item_shape) if item_shape is not None else self.input_shape[1:]
        if not all(isinstance(d, int) for d in item):
            return []
        dtype = INPUT_DTYPES.get(self.input_type, np.float32)
        sizes = sorted(self._buckets) if self._buckets else sorted({self.static_batch or s for s in batch_sizes})
        for size in sizes:
            self.run(np.zeros((size, *item), dtype=dtype))
        return sizes


def padded(chunk: Any, size: int) -> Any:
    """``chunk`` with zero images appended up to ``size``."""
    missing = size - len(chunk)
    if missing <= 0:
        return chunk
    xp = _array_module(chunk)
    return xp.concatenate([chunk, xp.zeros((missing, *chunk.shape[1:]), dtype=chunk.dtype)])


def _synchronize_cupy() -> None:
    """Wait for the work queued on CuPy's current stream (a GPU batch's making and padding)."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()


def _array_module(array: Any) -> Any:
    """numpy, or the array's own module for GPU arrays (CuPy), without importing CuPy here."""
    if device_pointer(array) is None:
        return np
    import cupy

    return cupy
