"""The speed gate: a lower precision is kept only where it is faster than FP32 on what the build can run.

After the accuracy gate the build times the served graph in the chosen precision against the same graph in
FP32 at the batch sizes it serves (1 and ``--max-batch``), in paired rounds that alternate which graph runs
first, so that a neighbour's load on a shared machine falls on both. The round's speed-up is the geometric mean
of its per-batch ratios; the gate takes the median round and asks for ``--speed-margin`` percent and a majority
of rounds won. On an ONNX Runtime CPU, Q/DQ INT8 and FP16 are often slower than FP32 (they simulate or cast
where no integer or half kernels run). Where the build cannot run the target (a TensorRT plan, a GPU detector
without a GPU here) nothing is timed and the precision is kept, which the record says.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

from generator.builder.spec.options import BuildOptions
from generator.model.onnx_inspect import DetectorInfo

logger = logging.getLogger(__name__)
ROUNDS = 7
WARMUP_RUNS = 2


@dataclass(frozen=True)
class SpeedDecision:
    """What the gate measured and decided; ``kept`` is the precision the repository serves."""

    asked: str
    kept: str
    mode: str
    measured_on: str  # the provider timed, or why nothing was
    margin_percent: float
    batch_sizes: tuple[int, ...] = ()
    rounds: int = 0
    fp32_ms: dict[str, float] = field(default_factory=dict)  # median per batch size
    candidate_ms: dict[str, float] = field(default_factory=dict)
    speedup: float | None = None  # median round of FP32 time / candidate time
    faster_rounds: int = 0
    reason: str = ""

    def to_fact(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def served_batch_sizes(options: BuildOptions, info: DetectorInfo) -> tuple[int, ...]:
    """The smallest and largest batch the detector serves (a static-batch export serves its own)."""
    if info.static_batch is not None:
        return (info.static_batch,)
    return tuple(sorted({1, options.max_batch}))


def _runner_settings(options: BuildOptions) -> tuple[dict[str, Any] | None, str]:
    """How to run the detector as served here, or None and why it cannot be."""
    from generator.serving.runner import session_threads

    if options.target == "tensorrt":
        return None, "not measured: the TensorRT plan is built and timed on the serving GPU host"
    if options.detector_device == "gpu":
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            return None, ("not measured: no CUDA provider in this ONNX Runtime; build on the GPU host "
                          "(pip install onnxruntime-gpu) to time the GPU detector")
        from generator.serving.cuda_provider import CudaSettings
        from generator.serving.runner import batch_buckets

        return {"cuda": CudaSettings(), "buckets": batch_buckets(options.max_batch)}, "onnxruntime CUDA"
    threads = session_threads(options.detector_thread_setting, options.detector_instances)
    return {"intra_op_threads": threads}, f"onnxruntime CPU, {threads} threads"


def _inputs(info: DetectorInfo, sizes: Sequence[int]) -> dict[int, np.ndarray]:
    """A letterboxed camera-like batch per size, in the served input's layout and type."""
    from generator.serving.batch import to_float_nchw

    rng = np.random.default_rng(0)
    height, width = info.image_size
    images = rng.integers(0, 256, (max(sizes), height, width, 3), dtype=np.uint8)
    if np.dtype(info.input.numpy_dtype) == np.uint8:
        return {size: images[:size] for size in sizes}
    return {size: to_float_nchw(images[:size], np.dtype(info.input.numpy_dtype)) for size in sizes}


def _paired_rounds(fp32: Any, candidate: Any, inputs: dict[int, np.ndarray], rounds: int
                   ) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    """Seconds per run of each graph, per round and batch size; the order alternates every round."""
    for runner in (fp32, candidate):
        for batch in inputs.values():
            for _ in range(WARMUP_RUNS):
                runner.run(batch)
    times: tuple[list[dict[int, float]], list[dict[int, float]]] = ([], [])
    for index in range(rounds):
        order = (0, 1) if index % 2 == 0 else (1, 0)
        this_round: tuple[dict[int, float], dict[int, float]] = ({}, {})
        for size, batch in inputs.items():
            for which in order:
                started = time.perf_counter()
                (fp32, candidate)[which].run(batch)
                this_round[which][size] = time.perf_counter() - started
        times[0].append(this_round[0])
        times[1].append(this_round[1])
    return times


def speed_gate(fp32: onnx.ModelProto, candidate: onnx.ModelProto, info_served: DetectorInfo,
               options: BuildOptions, rounds: int = ROUNDS) -> SpeedDecision:
    """Time ``candidate`` (the served graph in ``options.precision``) against the same graph in FP32."""
    gate = options.gate
    asked = options.precision
    if gate.speed_gate == "off":
        return SpeedDecision(asked, asked, "off", "not measured: --speed-gate off", gate.speed_margin)
    settings, where = _runner_settings(options)
    if settings is None:
        logger.info("speed gate: %s; keeping %s", where, asked)
        return SpeedDecision(asked, asked, gate.speed_gate, where, gate.speed_margin)
    from generator.serving.runner import OnnxRunner

    sizes = served_batch_sizes(options, info_served)
    inputs = _inputs(info_served, sizes)
    runners = [OnnxRunner(model.SerializeToString(), **settings) for model in (fp32, candidate)]
    fp32_times, candidate_times = _paired_rounds(runners[0], runners[1], inputs, rounds)
    ratios = [math.exp(statistics.fmean(math.log(f[s] / c[s]) for s in sizes))
              for f, c in zip(fp32_times, candidate_times, strict=True)]
    kept, speedup, won, verdict = decide(asked, ratios, gate.speed_margin, gate.speed_gate)
    logger.info("speed gate on %s: %s", where, verdict)
    return SpeedDecision(asked, kept, gate.speed_gate, where, gate.speed_margin, sizes, rounds,
                         _medians(fp32_times), _medians(candidate_times), round(speedup, 4), won, verdict)


def decide(asked: str, ratios: Sequence[float], margin_percent: float, mode: str) -> tuple[str, float, int, str]:
    """The precision to serve from each round's speed-up (FP32 time / candidate time), and why.

    Faster means the median round clears the margin and the candidate won most rounds, so one lucky round on a
    busy machine decides nothing either way. ``record`` keeps the asked precision whatever the timing.
    """
    speedup = statistics.median(ratios)
    won = sum(r > 1.0 for r in ratios)
    faster = speedup >= 1.0 + margin_percent / 100.0 and won > len(ratios) / 2
    kept = asked if faster or mode == "record" else "fp32"
    verdict = (f"{asked} is {speedup:.2f}x FP32 (median of {len(ratios)} paired rounds, faster in {won}; "
               f"needs {1 + margin_percent / 100:.2f}x)")
    if kept != asked:
        verdict += f": serving FP32 instead (--speed-gate record keeps {asked} anyway)"
    elif not faster:
        verdict += f": kept {asked} as asked (--speed-gate record)"
    return kept, speedup, won, verdict


def _medians(times: Sequence[dict[int, float]]) -> dict[str, float]:
    return {str(size): round(statistics.median(t[size] for t in times) * 1000, 3) for size in times[0]}
