"""What NMS inside the detector graph costs on ONNX Runtime (CPU) against the Python nms step, paired.

    python -m loadtest nms-bench [--onnx PATH] [--batch N] [--conf F] [--rounds N] [--threads N]

Runs the served detector once on a letterboxed batch of 1280x720 scenes, then alternates, round after round in
one process, on that same head: the Python step (decode, class-aware NMS, map back: ``generator.serving.nms``)
and the graph's NMS suffix alone (``generator.builder.stages.graph.nms``) followed by the step's map-back. The detector
before the suffix is the same graph either way, so only the suffix is timed, away from the detector's own noise.
Prints one JSON object (medians, minima, the median of the paired differences).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _served(onnx_path: Path, conf: float) -> tuple[Any, str, Any]:
    """The default served detector graph, its head layout and the inspected detector."""
    import onnx

    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions

    with tempfile.TemporaryDirectory() as tmp:
        result = build_repository(onnx_path, Path(tmp) / "repo", BuildOptions(conf_threshold=conf))
        model = onnx.load(str(Path(tmp) / "repo" / "yolo_detector" / "1" / "model.onnx"))
    detector = result.manifest.detector
    assert detector is not None and detector.served_layout is not None  # every build records it
    return model, detector.served_layout, result.info


def nms_only(head: Any, layout: str, settings: Any, opset: int) -> Any:
    """A graph that is only the NMS suffix: the served head in, the padded rows out."""
    from onnx import helper

    from generator.builder.stages.graph.nms import add_nms

    graph = helper.make_graph([helper.make_node("Identity", ["head"], [head.name])], "nms_only",
                              [helper.make_tensor_value_info("head", head.type.tensor_type.elem_type, None)], [head])
    graph.input[0].type.CopyFrom(head.type)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return add_nms(model, layout, settings)


def _session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _ms(step: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = step()
    return (time.perf_counter() - start) * 1000, out


def bench(onnx_path: Path, batch: int, conf: float, rounds: int, threads: int) -> dict[str, Any]:
    """The served head of one letterboxed batch, then in turn: the Python step, and the graph's NMS + map-back."""
    from generator.builder.stages.graph.nms import NmsSettings
    from generator.serving.batch import prepare_batch
    from generator.serving.contract import GRAPH_NMS_LAYOUT
    from generator.serving.nms import postprocess
    from loadtest.images import synthetic_images

    served, layout, info = _served(onnx_path, conf)
    prepared = prepare_batch(synthetic_images([(1280, 720)], per_size=batch, seed=1), info.image_size)
    detector = _session(served, threads)
    raw = detector.run(None, {detector.get_inputs()[0].name: prepared.images})[0]
    opset = max(o.version for o in served.opset_import if o.domain in ("", "ai.onnx"))
    suffix = _session(nms_only(served.graph.output[0], layout, NmsSettings(conf, 0.45, 100, info.num_classes),
                               opset), threads)
    letterbox = prepared.letterbox
    python_ms, graph_ms = [], []
    for index in range(rounds + 3):  # three warm-up rounds
        spent, want = _ms(lambda: postprocess(raw, layout, letterbox, conf, 0.45, 100))
        spent_graph, got = _ms(lambda: postprocess(suffix.run(None, {"head": raw})[0], GRAPH_NMS_LAYOUT,
                                                   letterbox, conf, 0.45, 100))
        if index >= 3:
            python_ms.append(spent)
            graph_ms.append(spent_graph)
    same = all(np.array_equal(getattr(want, k), getattr(got, k)) for k in ("num_detections", "boxes", "classes"))
    return {
        "onnx": onnx_path.name, "batch": batch, "conf": conf, "rounds": rounds, "threads": threads,
        "head": list(raw.shape), "layout": layout, "detections": int(want.num_detections.sum()),
        "same_detections": same,
        "python_step_ms": {"median": round(statistics.median(python_ms), 3), "min": round(min(python_ms), 3)},
        "graph_nms_and_map_back_ms": {"median": round(statistics.median(graph_ms), 3), "min": round(min(graph_ms), 3)},
        "paired_difference_ms_median": round(statistics.median(
            [g - p for g, p in zip(graph_ms, python_ms, strict=True)]), 3),
    }
