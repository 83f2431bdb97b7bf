"""What the native targets' classifier step costs against the embedded one: the padding crops it classifies too.

The embedded step runs the classifier on the real crops of a request only; the ``--target onnxruntime``/``tensorrt``
step runs its wrapped graph over all ``--classify-boxes`` rows and zeroes the padding. Both run here on ONNX Runtime
(CPU; Triton's native backends and a GPU are not available on this machine) for one request with 0, 2 and 20 real
crops of a cap of 20, the yolo11n-cls fixture at 320 px: the embedded step's ONNX with OnnxRunner and top_classes,
the onnxruntime build's model.onnx (real crops gathered) and the tensorrt build's (every row, fixed shapes: what the
plan is built from, run here in ONNX Runtime) with plain sessions. Arms alternate in a rotated order every round (paired
rounds); raw rounds go to ``runs/``, the summary is the median ms per request over rounds.

    PYTHONPATH=. python tools/classifier_step_bench.py [--rounds 5] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAP, COUNTS = 20, (0, 2, 20)


def _build(root: Path) -> dict[str, Path]:
    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions, TensorRTOptions
    from tests.fixtures import ultralytics as fixtures

    detector, classifier = fixtures.write("yolo11-static", root), fixtures.write("classify-dynamic", root)
    graphs = {}
    for target in ("embedded", "onnxruntime", "tensorrt"):
        options = BuildOptions(name="two", target=target, classifier=classifier, classify_boxes=CAP,
                               service_ms=50.0, tensorrt=TensorRTOptions(defer_plan=target == "tensorrt"))
        repo = build_repository(detector, root / target, options).output
        graphs[target] = repo / "two_classifier" / "1" / "model.onnx"
    return graphs


def _arms(graphs: dict[str, Path], threads: int) -> dict[str, Callable[[], object]]:
    import onnxruntime as ort

    from generator.serving.runner import OnnxRunner
    from generator.serving.tasks import top_classes

    runner = OnnxRunner(str(graphs["embedded"]), threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = {target: ort.InferenceSession(str(graphs[target]), options, providers=["CPUExecutionProvider"])
                for target in ("onnxruntime", "tensorrt")}
    crops = np.random.default_rng(0).integers(0, 256, (1, CAP, 320, 320, 3), dtype=np.uint8)
    arms: dict[str, Callable[[], object]] = {}
    for count in COUNTS:
        real = np.ascontiguousarray(crops[0, :count])
        padded = crops.copy()
        padded[0, count:] = 0
        feed = {"CROPS": padded, "CROP_COUNT": np.array([[count]], dtype=np.int32)}
        arms[f"embedded/{count}"] = functools.partial(_embedded, runner, top_classes, real)
        for target, session in sessions.items():
            arms[f"{target}/{count}"] = functools.partial(session.run, None, feed)
    return arms


def _embedded(runner: Any, top_classes: Callable[..., object], real: np.ndarray) -> object:
    """What models/classifier.py does for one request: nothing without crops, else the real crops' top-5."""
    return top_classes(runner.run(real)[0], 5) if len(real) else None


def _time_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # warm
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) * 1000 / repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        arms = _arms(_build(Path(tmp)), args.threads)
        names = list(arms)
        rounds = []
        for index in range(args.rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            rounds.append({name: _time_ms(arms[name], args.repeats) for name in order})
    summary = {name: round(statistics.median(r[name] for r in rounds), 1) for name in names}
    out = ROOT / "runs" / f"classifier_step_bench-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rounds": rounds, "median_ms": summary}, indent=2))
    for name, ms in summary.items():
        print(f"{name:16s} {ms:8.1f} ms per request")
    print(f"raw rounds: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
