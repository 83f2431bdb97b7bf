"""COCO mAP of a detector on synthetic scenes, and a CLI that scores an ONNX file end to end.

    python -m generator.demo.evaluate --onnx generator/demo/demo_detector.onnx [--count 200 --seed 12345]

The CLI runs the ONNX through ``generator.evaluation.reference.ReferencePipeline`` -- the production preprocessing
and NMS -- on a freshly written held-out set, so the number measures what the served ensemble returns.
Scoring uses faster-coco-eval's pycocotools-compatible API.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from generator.synthetic import CLASS_NAMES, write_dataset

Detector = Callable[[bytes], tuple[np.ndarray, np.ndarray, np.ndarray]]

# Training draws scenes from seed 20240601 (generator/demo/training/data.py); this one is never used there.
HELD_OUT_SEED = 12345


def evaluate(detect: Detector, annotations_json: Path) -> dict[str, object]:
    """Run ``detect`` (encoded image -> xyxy boxes, scores, class ids) on every image of a COCO set.

    Returns ``map50_95``, ``map50``, ``map50_95_small_medium_large``, ``per_class_map50`` (name -> AP@0.5),
    ``images`` and ``detections``.
    """
    from faster_coco_eval import COCO, COCOeval_faster

    annotations_json = Path(annotations_json)
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        gt = COCO(str(annotations_json))
    results: list[dict[str, object]] = []
    for image in gt.dataset["images"]:
        data = (annotations_json.parent / image["file_name"]).read_bytes()
        boxes, scores, classes = detect(data)
        for box, score, cls in zip(
            np.asarray(boxes).tolist(), np.asarray(scores).tolist(), np.asarray(classes).tolist(), strict=True
        ):
            x1, y1, x2, y2 = box
            results.append(
                {
                    "image_id": image["id"],
                    "category_id": int(cls),
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": float(score),
                }
            )
    summary: dict[str, object] = {"images": len(gt.dataset["images"]), "detections": len(results)}
    if not results:  # loadRes cannot take an empty list; nothing found means zero precision
        return {
            **summary,
            "map50_95": 0.0,
            "map50": 0.0,
            "per_class_map50": {c["name"]: 0.0 for c in gt.dataset["categories"]},
        }
    with contextlib.redirect_stdout(quiet):
        dt = gt.loadRes(results)
        ev = COCOeval_faster(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    # precision: [T iou thresholds, R recall points, K classes, A areas, M max-dets]; -1 marks "no data".
    precision = np.asarray(ev.eval["precision"])[0, :, :, 0, -1]
    per_class = {}
    for k, cat_id in enumerate(ev.params.catIds):
        column = precision[:, k]
        name = next(c["name"] for c in gt.dataset["categories"] if c["id"] == cat_id)
        per_class[name] = float(column[column > -1].mean()) if (column > -1).any() else 0.0
    return {
        **summary,
        "map50_95": float(ev.stats[0]),
        "map50": float(ev.stats[1]),
        # COCO size buckets in source pixels: small < 32^2 <= medium < 96^2 <= large (-1: none in the set).
        "map50_95_small_medium_large": [float(v) for v in ev.stats[3:6]],
        "per_class_map50": per_class,
    }


def _parse_sizes(text: str) -> list[tuple[int, int]]:
    try:
        sizes = [tuple(int(v) for v in item.lower().split("x")) for item in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(s) != 2 or min(s) < 32 for s in sizes):
        raise argparse.ArgumentTypeError(
            f"expected sizes like 640x480,1280x720 (each side >= 32), got {text!r}"
        )
    return [(s[0], s[1]) for s in sizes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m generator.demo.evaluate",
        description="COCO mAP of an ONNX detector on held-out synthetic scenes.",
    )
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=HELD_OUT_SEED)
    parser.add_argument("--sizes", type=_parse_sizes, default=[(640, 480)], help="e.g. 640x480,1280x720")
    parser.add_argument("--conf-threshold", type=float, default=0.001)
    parser.add_argument("--iou-threshold", type=float, default=0.45)
    parser.add_argument("--max-detections", type=int, default=100)
    args = parser.parse_args(argv)
    if not args.onnx.is_file():
        print(f"error: no ONNX file at {args.onnx}", file=sys.stderr)
        return 1
    if args.count < 1:
        print("error: --count must be at least 1", file=sys.stderr)
        return 1

    from generator.errors import GeneratorError
    from generator.evaluation.reference import ReferencePipeline

    try:
        pipeline = ReferencePipeline(
            args.onnx,
            conf_threshold=args.conf_threshold,
            iou_threshold=args.iou_threshold,
            max_detections=args.max_detections,
        )
    except GeneratorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if pipeline.class_names and list(pipeline.class_names) != list(CLASS_NAMES):
        print(
            f"warning: model classes {list(pipeline.class_names)} differ from the synthetic classes "
            f"{list(CLASS_NAMES)}; scores compare ids only",
            file=sys.stderr,
        )

    def detect(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = pipeline.detect(data)
        return found.boxes, found.scores, found.classes

    with tempfile.TemporaryDirectory(prefix="demo-eval-") as tmp:
        annotations = write_dataset(Path(tmp), args.count, args.seed, sizes=args.sizes)
        report = evaluate(detect, annotations)
    report = {
        "onnx": str(args.onnx),
        "seed": args.seed,
        "sizes": [f"{w}x{h}" for w, h in args.sizes],
        **report,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
