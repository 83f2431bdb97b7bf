"""The rollout's flags and what they turn into: the connection to a Triton, the control set, the settings of
generator.operate.rollout.workflow and the printed record with its exit code.

Shared by ``python -m generator rollout|rollback`` (generator/cli/) and deploy's rollout container
(deploy/entrypoints/rollout_job.py), so neither imports the other's command-line module."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients import admin_token
from generator.errors import GeneratorError
from generator.operate.admin import Control, ModelControl
from generator.operate.rollout.decision import Thresholds

if TYPE_CHECKING:
    from generator.operate.rollout.workflow import RolloutSettings

logger = logging.getLogger(__name__)

_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
_HELP = {
    "min_requests": "users' requests each side needs before its traffic is judged (fewer: observe on, then "
                    "undecided)",
    "min_latency_pairs": "paired probes (a control image through both sides) before latency is judged",
    "confidence": "one-sided confidence of the bounds each check compares with its limit",
    "max_error_rate_increase": "failed-request share the canary may add (0.01: one point)",
    "max_latency_ratio": "latency the canary may reach, as a multiple of stable's (paired probes) ...",
    "max_latency_increase_ms": "... and in milliseconds above it (only exceeding both fails)",
    "max_empty_share_increase": "share of images answered with no detection the canary may add",
    "max_capped_share_increase": "share of outputs capped at --max-detections the canary may add",
    "max_detections_distance": "largest gap between the detections-per-image distributions (KS, 0..1)",
    "max_score_distance": "largest gap between the score distributions (KS, 0..1)",
    "min_agreement": "matched detections on the mirrored control images (F1 at IoU 0.5), at least",
    "max_label_map_drop": "with --control-labels: mAP@0.5 on the labelled control images the canary may lose",
}
# Flags of the p95-summary comparison, renamed when the latency became paired probes and the request floor applied
# to both sides: still accepted, with a warning, so that scripts and manifests written for them keep working.
_RENAMED = {"min_canary_requests": "min_requests", "max_p95_ratio": "max_latency_ratio",
            "max_p95_increase_ms": "max_latency_increase_ms"}


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", type=Path, required=True, help="the versioned repository Triton serves")
    parser.add_argument("--url", default="127.0.0.1:8000",
                        help="Triton's HTTP endpoint host:port (started with --model-control explicit)")
    parser.add_argument("--metrics-url", default="127.0.0.1:8002", help="Triton's metrics endpoint host:port")
    admin_token.add_arguments(parser, "for the admin API")
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
    parser.add_argument("--max-window-s", type=float, default=None,
                        help="while the window's evidence is short of a verdict, observe on up to this many seconds "
                             "in all, then end undecided (exit 4) (default: 4 x --window-s)")
    parser.add_argument("--probe-interval-s", type=float, default=0.5,
                        help="one control image through both sides, timed, this often (the latency evidence)")
    parser.add_argument("--watch-s", type=float, default=None,
                        help="after a promotion, seconds the new stable version is watched against the one before "
                             "it, rolled back on degradation (default: --window-s; 0: no watch)")
    parser.add_argument("--infer-url", default=None,
                        help="where the control images are sent (default: http:// + --url; grpc://HOST:PORT)")
    parser.add_argument("--control-images", type=Path, default=None,
                        help="folder of your images sent to both versions and compared (default: the demo's 8 "
                             "synthetic scenes)")
    parser.add_argument("--control-labels", type=Path, default=None,
                        help="COCO JSON labels of --control-images (category_id = class index): both versions' "
                             "mAP@0.5 on them is checked and recorded")
    parser.add_argument("--record", type=Path, default=None,
                        help="also write the decision record here (it is always kept beside the candidate)")
    defaults = Thresholds()
    for spec in fields(Thresholds):
        parser.add_argument(f"--{spec.name.replace('_', '-')}", type=type(getattr(defaults, spec.name)),
                            default=getattr(defaults, spec.name), help=_HELP[spec.name])
    for old, new in _RENAMED.items():
        parser.add_argument(f"--{old.replace('_', '-')}", type=type(getattr(defaults, new)), default=None,
                            help=f"renamed: use --{new.replace('_', '-')}")


def _renamed_flags(args: argparse.Namespace) -> None:
    """Move a renamed flag's value onto its new name, warning once per flag."""
    for old, new in _RENAMED.items():
        value = getattr(args, old, None)
        if value is not None:
            logger.warning("--%s is renamed --%s; it still works for now", old.replace("_", "-"),
                           new.replace("_", "-"))
            setattr(args, new, value)


def admin_token_of(args: argparse.Namespace) -> str | None:
    """--admin-token, else the file --admin-token-file names, else $TRITON_ADMIN_TOKEN."""
    from clients.errors import ClientError

    try:
        return admin_token.token_from(args)
    except ClientError as exc:
        raise GeneratorError(str(exc)) from None


def control_from_args(args: argparse.Namespace) -> ModelControl:
    return ModelControl(args.url.removeprefix("http://"), args.metrics_url.removeprefix("http://"), admin_token_of(args))


def control_set(folder: Path | None, labels: Path | None = None
                ) -> tuple[tuple[bytes, ...], dict[str, object], dict[str, Any] | None]:
    """The control images, what the record says about them (the user's folder: file names and a digest; or the
    demo's synthetic scenes) and their COCO labels when given."""
    import hashlib

    if folder is None:
        if labels is not None:
            raise GeneratorError("--control-labels needs --control-images (the folder they label)")
        images = control_images(None)
        return images, {"source": "synthetic", "images": len(images), "sha256": _digest(images),
                        "note": "the demo's 8 synthetic scenes: pass --control-images with images of your domain"}, None
    from generator.evaluation.gate import folder_control_set

    chosen = folder_control_set(folder, labels)  # every image decodes, every label names a file of the folder
    images = tuple(chosen.data)
    names = [str(record["file_name"]) for record in chosen.images]
    source: dict[str, object] = {
        "source": "user", "folder": str(folder), "images": len(images), "sha256": _digest(images),
        "files": names[:50], "labelled": labels is not None,
        **({"labels": str(labels), "labels_sha256": hashlib.sha256(labels.read_bytes()).hexdigest(),
            "annotations": len(chosen.labels["annotations"]) if chosen.labels else 0} if labels else {})}
    return images, source, chosen.labels


def _digest(images: tuple[bytes, ...]) -> str:
    import hashlib

    return hashlib.sha256(b"".join(hashlib.sha256(image).digest() for image in images)).hexdigest()


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


def settings_from_args(args: argparse.Namespace, control: Control | None = None, **extra: object) -> RolloutSettings:
    """The rollout's settings from its flags (``control``: what to drive instead of the one server --url names;
    ``extra``: what a caller adds, e.g. deploy's route publisher)."""
    from generator.operate.rollout.workflow import RolloutSettings

    if not 0 < args.canary_percent <= 100 or args.window_s <= 0:
        raise GeneratorError("--canary-percent must be within (0, 100] and --window-s above 0")
    if args.max_window_s is not None and args.max_window_s < args.window_s:
        raise GeneratorError(f"--max-window-s {args.max_window_s:g} is shorter than --window-s {args.window_s:g}")
    if not 0.05 <= args.probe_interval_s <= args.window_s:
        raise GeneratorError("--probe-interval-s must be within 0.05 s and --window-s")
    _renamed_flags(args)
    watch_s = args.window_s if args.watch_s is None else args.watch_s
    if watch_s < 0:
        raise GeneratorError("--watch-s must be 0 (no watch) or more")
    thresholds = Thresholds(**{f.name: getattr(args, f.name) for f in fields(Thresholds)})
    images, source, truth = control_set(args.control_images, args.control_labels)
    return RolloutSettings(
        repository=args.model_repository, control=control or control_from_args(args),
        infer_url=args.infer_url or f"http://{args.url.removeprefix('http://')}", control_images=images,
        canary_percent=args.canary_percent, window_s=args.window_s, drain_s=args.drain_s, candidate=args.candidate,
        thresholds=thresholds, route_file=args.route_file, watch_s=watch_s, control_source=source,
        control_truth=truth, max_window_s=args.max_window_s, probe_interval_s=args.probe_interval_s,
        **extra)  # type: ignore[arg-type]


def report(record: dict[str, object], args: argparse.Namespace) -> int:
    """Print the record (and write it where --record says); exit 0 for a promotion kept, 3 for any rollback,
    4 undecided (outcome.py)."""
    from generator.operate.rollout.outcome import exit_code

    text = json.dumps(record, indent=2)
    if args.record is not None:
        args.record.write_text(text + "\n")
    print(text)
    return exit_code(record)
