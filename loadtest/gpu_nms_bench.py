"""What NMS inside the detector graph costs on ONNX Runtime (CPU) against the Python nms step, paired.

    python -m loadtest.gpu_nms_bench [--onnx PATH] [--batch N] [--conf F] [--rounds N] [--threads N]

Builds the served detector twice (default, and ``--nms-in-graph``), then alternates within each round: the
default graph followed by the Python step (decode, class-aware NMS, map back: ``generator.serving.nms``), and the
graph with NMS followed by the Python step's map-back alone. One process, the same letterboxed batch, medians of
paired differences, so drift of the shared CPU cancels. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _served(onnx_path: Path, folder: Path, nms_in_graph: bool, conf: float) -> Any:
    import onnx

    from generator.builder.options import BuildOptions
    from generator.builder.pipeline import build_repository

    result = build_repository(onnx_path, folder, BuildOptions(nms_in_graph=nms_in_graph, conf_threshold=conf))
    model = onnx.load(str(folder / "yolo_detector" / "1" / "model.onnx"))
    return model, result.manifest["detector"]["served_layout"], result.info


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
    from generator.serving.batch import prepare_batch
    from generator.serving.nms import postprocess
    from loadtest.images import synthetic_images

    with tempfile.TemporaryDirectory() as tmp:
        plain, plain_layout, info = _served(onnx_path, Path(tmp) / "plain", False, conf)
        fused, fused_layout, _ = _served(onnx_path, Path(tmp) / "nms", True, conf)
    prepared = prepare_batch(synthetic_images([(1280, 720)], per_size=batch, seed=1), info.image_size)
    images, letterbox = prepared.images, prepared.letterbox
    sessions = [_session(plain, threads), _session(fused, threads)]
    feeds = [{s.get_inputs()[0].name: images} for s in sessions]
    samples: dict[str, list[float]] = {k: [] for k in ("graph", "python_nms", "graph_with_nms", "map_back")}
    for index in range(rounds + 2):  # two warm-up rounds
        graph_ms, raw = _ms(lambda: sessions[0].run(None, feeds[0])[0])
        nms_ms, want = _ms(lambda raw=raw: postprocess(raw, plain_layout, letterbox, conf, 0.45, 100))
        fused_ms, rows = _ms(lambda: sessions[1].run(None, feeds[1])[0])
        back_ms, got = _ms(lambda rows=rows: postprocess(rows, fused_layout, letterbox, conf, 0.45, 100))
        if index >= 2:
            for key, value in zip(samples, (graph_ms, nms_ms, fused_ms, back_ms), strict=True):
                samples[key].append(value)
    same = all(np.array_equal(getattr(want, k), getattr(got, k)) for k in ("num_detections", "boxes", "classes"))
    python_total = [a + b for a, b in zip(samples["graph"], samples["python_nms"], strict=True)]
    fused_total = [a + b for a, b in zip(samples["graph_with_nms"], samples["map_back"], strict=True)]
    return {
        "onnx": onnx_path.name, "batch": batch, "conf": conf, "rounds": rounds, "threads": threads,
        "detections": int(want.num_detections.sum()), "same_detections": same,
        **{f"{k}_ms_median": round(statistics.median(v), 3) for k, v in samples.items()},
        "nms_in_graph_minus_python_ms_median": round(statistics.median(
            [f - p for f, p in zip(fused_total, python_total, strict=True)]), 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    from generator.demo import DEMO_ONNX

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--onnx", type=Path, default=DEMO_ONNX)
    parser.add_argument("--batch", type=int, default=8, help="images per run (1 for a static batch-1 export)")
    parser.add_argument("--conf", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads")
    args = parser.parse_args(argv)
    print(json.dumps(bench(args.onnx, args.batch, args.conf, args.rounds, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
