"""Does every request get its own image's detections under load? (issue 35: Triton's CUDA pool overflowing)

    python -m tools.gpu.handoff_check --url 127.0.0.1:8001 --model y11 --concurrency 256 --seconds 8 --out F.json

Each of ``--images`` distinct synthetic 1280x720 JPEGs is sent alone first, one at a time: its reference detections.
Then ``--concurrency`` requests stay in flight for ``--seconds``, cycling through the images, and every response is
compared with its image's reference (same count, same classes, boxes within ``--tolerance-px``). A server that hands
an image between its steps wrongly (a GPU output never copied) answers with another image's detections or garbage,
and no error: this counts those answers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from pathlib import Path

import numpy as np

from clients.async_client import AsyncDetectionClient
from clients.detection import DetectionResult
from loadtest.images import synthetic_images


def same(result: DetectionResult, reference: DetectionResult, tolerance_px: float) -> bool:
    """The same detections: count, classes in order and every box corner within the tolerance."""
    if len(result) != len(reference):
        return False
    if [d.class_id for d in result] != [d.class_id for d in reference]:
        return False
    return len(result) == 0 or float(np.abs(result.boxes - reference.boxes).max()) <= tolerance_px


def another_image(result: DetectionResult, references: list[DetectionResult], index: int,
                  tolerance_px: float) -> bool:
    """``result`` is exactly the detections of another image than ``index`` (one that has any): pixels handed
    over to the wrong request. An empty answer is never counted, though it equals every image without detections."""
    return len(result) > 0 and any(same(result, other, tolerance_px)
                                   for i, other in enumerate(references) if i != index)


async def check(args: argparse.Namespace) -> dict[str, object]:
    images = synthetic_images([(1280, 720)], per_size=args.images, seed=7)
    async with AsyncDetectionClient(args.url, model=args.model, timeout_s=120.0) as client:
        references = [await client.detect(image) for image in images]
        order = itertools.cycle(range(len(images)))
        counts = {"requests": 0, "mismatched": 0, "failed": 0}
        # per image: its requests, its mismatches, and of those how many are another image's detections exactly (an
        # image handed over wrongly) and how many differ in count by more than 2 (not detections near the threshold)
        per_image = [{"requests": 0, "mismatched": 0, "another_image": 0, "count_off_by_3_or_more": 0}
                     for _ in images]
        deadline = time.monotonic() + args.seconds

        async def worker() -> None:
            while time.monotonic() < deadline:
                index = next(order)
                try:
                    result = await client.detect(images[index])
                except Exception:  # noqa: BLE001 -- a failed request is counted, not a mismatch
                    counts["failed"] += 1
                    continue
                counts["requests"] += 1
                tally = per_image[index]
                tally["requests"] += 1
                if not same(result, references[index], args.tolerance_px):
                    counts["mismatched"] += 1
                    tally["mismatched"] += 1
                    tally["another_image"] += another_image(result, references, index, args.tolerance_px)
                    tally["count_off_by_3_or_more"] += abs(len(result) - len(references[index])) >= 3

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    return {**counts, "images": len(images), "concurrency": args.concurrency, "seconds": args.seconds,
            "reference_detections": [len(r) for r in references], "per_image": per_image}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--images", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--tolerance-px", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    summary = asyncio.run(check(args))
    args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
