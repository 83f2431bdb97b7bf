"""What the second stage of a two-stage build costs per box: served images/s with 0, 5 and 20 boxes classified.

Builds the yolo11 detector fixture alone and with the yolo11n-cls fixture (``--classifier``, ``--classify-boxes``
5 and 20), serves the three on one embedded Triton and sends single-image requests from ``--concurrency`` threads,
each arm for ``--seconds`` per round, the arms in a rotated order every round (paired rounds: a busy neighbour on a
shared machine slows every arm of that round alike). The boxes per image come from the cap and the image: a scene
with 100 detections (5 or 20 classified) and one with none (0). Raw rounds go to ``runs/``; the summary is the
median over rounds.

    PYTHONPATH=. python tools/two_stage_bench.py [--rounds 3] [--seconds 6] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUSY_SCENE, EMPTY_SCENE = 2, 5  # 1280x720 with 100 detections, 360x640 with none (tests/fixtures/ultralytics)


@dataclass(frozen=True)
class Arm:
    name: str
    model: str
    scene: int
    boxes: int  # classified per image


ARMS = (
    Arm("detection only, busy scene", "det", BUSY_SCENE, 0),
    Arm("detection only, empty scene", "det", EMPTY_SCENE, 0),
    Arm("two-stage, empty scene", "two20", EMPTY_SCENE, 0),
    Arm("two-stage cap 5, busy scene", "two5", BUSY_SCENE, 5),
    Arm("two-stage cap 20, busy scene", "two20", BUSY_SCENE, 20),
)


def build(root: Path) -> list[Path]:
    """The detection-only repository and the two two-stage ones, built with the defaults otherwise."""
    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions
    from tests.fixtures import ultralytics as fixtures

    detector = fixtures.write("yolo11-static", root / "onnx")
    classifier = fixtures.write("classify-dynamic", root / "onnx")
    builds = {"det": BuildOptions(name="det"),
              "two5": BuildOptions(name="two5", classifier=classifier, classify_boxes=5),
              "two20": BuildOptions(name="two20", classifier=classifier, classify_boxes=20)}
    for name, options in builds.items():
        build_repository(detector, root / name, options)
    return [root / name for name in builds]


def drive(url: str, model: str, image: bytes, seconds: float, concurrency: int) -> dict[str, Any]:
    """Send ``image`` to ``model`` from ``concurrency`` threads for ``seconds``; images/s and latencies."""
    import tritonclient.grpc as grpcclient

    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker() -> None:
        client = grpcclient.InferenceServerClient(url)
        tensor = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([image], dtype=object).reshape(1, 1))
        while time.perf_counter() < stop:
            start = time.perf_counter()
            client.infer(model, [tensor])
            with lock:
                latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"images": len(latencies), "seconds": round(elapsed, 3),
            "images_per_s": round(len(latencies) / elapsed, 2),
            "p50_ms": round(1000 * float(np.percentile(latencies, 50)), 1),
            "p95_ms": round(1000 * float(np.percentile(latencies, 95)), 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from generator.server.embedded import EmbeddedServer
    from generator.server.ports import free_port
    from generator.synthetic import encode
    from tests.fixtures.ultralytics.predict import scene_images

    scenes = scene_images()
    images = {index: encode(scenes[index], ".png") for index in (BUSY_SCENE, EMPTY_SCENE)}
    with tempfile.TemporaryDirectory(prefix="tde-two-stage-bench-") as tmp:
        repositories = build(Path(tmp))
        with EmbeddedServer(repositories[0], free_port(), free_port(), free_port(), log_file=Path(tmp) / "log",
                            extra_args=tuple(f"--model-repository={r}" for r in repositories[1:])) as server:
            for arm in ARMS:  # warm every model and arm once, untimed
                drive(server.grpc_url, arm.model, images[arm.scene], 1.0, args.concurrency)
            rounds = []
            for number in range(args.rounds):
                order = ARMS[number % len(ARMS):] + ARMS[:number % len(ARMS)]
                rounds.append({arm.name: drive(server.grpc_url, arm.model, images[arm.scene], args.seconds,
                                               args.concurrency) for arm in order})
    summary = {arm.name: {"boxes_per_image": arm.boxes,
                          "images_per_s": statistics.median(r[arm.name]["images_per_s"] for r in rounds),
                          "p50_ms": statistics.median(r[arm.name]["p50_ms"] for r in rounds)} for arm in ARMS}
    return {"concurrency": args.concurrency, "seconds": args.seconds, "rounds": rounds, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--output", type=Path, default=ROOT / "runs" / "two-stage-bench.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or args.concurrency < 1:
        print("--rounds, --seconds and --concurrency must be positive", file=sys.stderr)
        return 1
    result = run(args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print("| arm | boxes classified per image | images/s (median) | p50 ms |")
    print("|---|---|---|---|")
    for name, row in result["summary"].items():
        print(f"| {name} | {row['boxes_per_image']} | {row['images_per_s']} | {row['p50_ms']} |")
    print(f"raw rounds: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
