"""Paired A/B latency of two proxies in front of the same Triton: what a proxy change costs per request.

Requests alternate between the two URLs (the order flips every pair), so drift on a shared machine hits both
alike; the result is the median of the per-pair differences (B - A), with each side's p50 and p95.

    python -m tools.proxy_ab --a https://localhost:18953 --b https://localhost:18943 --ca-cert tls.crt \\
        --pairs 300 --out runs/proxy-ab.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

logger = logging.getLogger(__name__)


def _image() -> bytes:
    import numpy as np

    from generator.synthetic import encode, make_scene

    return encode(make_scene(np.random.default_rng(3), 640, 480).image)


def measure(a: str, b: str, ca_cert: Path, model: str, pairs: int, warmup: int = 20) -> dict[str, object]:
    """Alternating detections through ``a`` and ``b``: per-side p50/p95 and the paired B - A deltas (ms)."""
    from clients import DetectionClient

    image = _image()
    times: dict[str, list[float]] = {"a": [], "b": []}
    with DetectionClient(a, model=model, ca_cert=ca_cert, timeout_s=30) as first, \
            DetectionClient(b, model=model, ca_cert=ca_cert, timeout_s=30) as second:
        sides = {"a": first, "b": second}
        for client in sides.values():
            for _ in range(warmup):
                client.detect(image)
        for i in range(pairs):
            for name in ("a", "b") if i % 2 else ("b", "a"):
                started = time.perf_counter()
                sides[name].detect(image)
                times[name].append((time.perf_counter() - started) * 1000)
    deltas = [y - x for x, y in zip(times["a"], times["b"], strict=True)]
    summary = {side: {"p50_ms": statistics.median(v), "p95_ms": statistics.quantiles(v, n=20)[18]}
               for side, v in times.items()}
    return {"a_url": a, "b_url": b, "pairs": pairs, **summary, "median_paired_delta_ms": statistics.median(deltas),
            "mean_paired_delta_ms": statistics.fmean(deltas)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.proxy_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the baseline proxy's URL (https://... or grpcs://...)")
    parser.add_argument("--b", required=True, help="the changed proxy's URL, same protocol")
    parser.add_argument("--ca-cert", type=Path, required=True, help="the certificate both proxies present")
    parser.add_argument("--model", default="yolo")
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--out", type=Path, help="write the result as JSON here (e.g. under runs/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.a.split("://")[0] != args.b.split("://")[0]:
        print("error: --a and --b must use the same protocol", file=sys.stderr)
        return 1
    result = measure(args.a, args.b, args.ca_cert, args.model, args.pairs)
    logger.info(json.dumps(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
