"""``rollout``: load the newest candidate version beside the stable one, give it a share of the traffic, compare
both on the same window, and promote or roll back by itself (generator.operate.rollout.workflow)."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import fields
from pathlib import Path

from generator.errors import GeneratorError
from generator.operate.admin import ModelControl
from generator.operate.rollout.decision import Thresholds
from generator.serving.contract import ADMIN_TOKEN_ENV

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
_HELP = {
    "min_canary_requests": "roll back when the canary answered fewer requests in the window",
    "max_error_rate_increase": "failed-request share the canary may add (0.01: one point)",
    "max_p95_ratio": "p95 latency the canary may reach, as a multiple of stable's ...",
    "max_p95_increase_ms": "... and in milliseconds above it (only exceeding both fails)",
    "max_empty_share_increase": "share of images answered with no detection the canary may add",
    "max_capped_share_increase": "share of outputs capped at --max-detections the canary may add",
    "max_detections_distance": "largest gap between the detections-per-image distributions (KS, 0..1)",
    "max_score_distance": "largest gap between the score distributions (KS, 0..1)",
    "min_agreement": "matched detections on the mirrored control images (F1 at IoU 0.5), at least",
}


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", type=Path, required=True, help="the versioned repository Triton serves")
    parser.add_argument("--url", default="127.0.0.1:8000",
                        help="Triton's HTTP endpoint host:port (started with --model-control explicit)")
    parser.add_argument("--metrics-url", default="127.0.0.1:8002", help="Triton's metrics endpoint host:port")
    parser.add_argument("--admin-key", default=None, help=f"the admin API key (default: ${ADMIN_TOKEN_ENV})")
    parser.add_argument("--route-file", type=Path, default=None,
                        help="where the stable/canary split is published for clients (default: "
                             "routing.json in the repository)")
    parser.add_argument("--drain-s", type=float, default=10.0,
                        help="the most to wait for requests in flight before a version is unloaded")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("--candidate", type=int, default=None, help="version to try (default: the newest candidate)")
    parser.add_argument("--canary-percent", type=float, default=10.0, help="share of requests sent to the candidate")
    parser.add_argument("--window-s", type=float, default=60.0, help="seconds of traffic compared")
    parser.add_argument("--control-images", type=Path, default=None,
                        help="folder of images sent to both versions and compared (default: 8 synthetic scenes)")
    parser.add_argument("--record", type=Path, default=None,
                        help="also write the decision record here (it is always kept beside the candidate)")
    defaults = Thresholds()
    for spec in fields(Thresholds):
        parser.add_argument(f"--{spec.name.replace('_', '-')}", type=type(getattr(defaults, spec.name)),
                            default=getattr(defaults, spec.name), help=_HELP[spec.name])


def control_from_args(args: argparse.Namespace) -> ModelControl:
    return ModelControl(args.url.removeprefix("http://"), args.metrics_url.removeprefix("http://"),
                        args.admin_key or os.environ.get(ADMIN_TOKEN_ENV))


def control_images(folder: Path | None) -> tuple[bytes, ...]:
    if folder is None:
        import numpy as np

        from generator.synthetic.dataset import encode
        from generator.synthetic.scenes import make_scene

        rng = np.random.default_rng(1901)
        return tuple(encode(make_scene(rng).image) for _ in range(8))
    if not folder.is_dir():
        raise GeneratorError(f"--control-images {folder} is not a folder")
    images = tuple(p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix.lower() in _IMAGE_SUFFIXES)
    if not images:
        raise GeneratorError(f"--control-images {folder} holds no images ({', '.join(_IMAGE_SUFFIXES)})")
    return images


def run(args: argparse.Namespace) -> int:
    from generator.operate.rollout.workflow import RolloutSettings, rollout

    if not 0 < args.canary_percent <= 100 or args.window_s <= 0:
        raise GeneratorError("--canary-percent must be within (0, 100] and --window-s above 0")
    thresholds = Thresholds(**{f.name: getattr(args, f.name) for f in fields(Thresholds)})
    settings = RolloutSettings(
        repository=args.model_repository, control=control_from_args(args), infer_url=f"http://{args.url}",
        control_images=control_images(args.control_images), canary_percent=args.canary_percent,
        window_s=args.window_s, drain_s=args.drain_s, candidate=args.candidate, thresholds=thresholds,
        route_file=args.route_file)
    record = rollout(settings)
    text = json.dumps(record, indent=2)
    if args.record is not None:
        args.record.write_text(text + "\n")
    print(text)
    return 0 if record["action"] == "promote" else 3
