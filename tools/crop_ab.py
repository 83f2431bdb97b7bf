"""Paired A/B time of the preprocess step's two placements on the same batch: the detection letterbox (OpenCV's
bilinear resize) and the classifier's centre crop (Pillow's antialiased bilinear in numpy, generator.serving.crop).

Rounds alternate (the order flips every pair), so drift on a shared machine hits both alike; the result is each
side's median over the rounds. Both decode at full resolution, so the difference is the placement alone.

    python -m tools.crop_ab --width 1280 --height 720 --batch 8 --rounds 30 --out runs/crop-ab.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def _batch(width: int, height: int, count: int) -> list[bytes]:
    import numpy as np

    from generator.synthetic import encode, make_scene

    return [encode(make_scene(np.random.default_rng(seed), width, height).image) for seed in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.crop_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=320, help="the network input (square)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="raw rounds as JSON (runs/ is git-ignored)")
    args = parser.parse_args(argv)
    if min(args.width, args.height, args.batch, args.size, args.rounds) < 1:
        print("error: --width, --height, --batch, --size and --rounds must be at least 1", file=sys.stderr)
        return 1
    import cv2

    from generator.serving.batch import prepare_batch
    from generator.serving.crop import center_crop_into
    from generator.serving.letterbox import letterbox_into

    cv2.setNumThreads(1)  # as the preprocess model runs
    images = _batch(args.width, args.height, args.batch)
    sides = {"letterbox": letterbox_into, "center_crop": center_crop_into}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds + 1):  # the first round warms both up and is dropped
        for name in (list(sides) if round_ % 2 else list(sides)[::-1]):
            start = time.perf_counter()
            prepare_batch(images, (args.size, args.size), reduced_decode=False, place=sides[name])
            if round_:
                times[name].append((time.perf_counter() - start) * 1000)
    result = {name: statistics.median(values) for name, values in times.items()}
    print(f"batch of {args.batch} {args.width}x{args.height} to {args.size}: "
          + ", ".join(f"{name} {ms:.1f} ms" for name, ms in result.items()) + " (median of alternating rounds)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "ms": times,
                                        "median_ms": result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
