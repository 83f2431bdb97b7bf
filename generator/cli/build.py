"""``build``: ONNX in, model repository out. Every build option comes from its declaration in
``generator.builder.spec.options``.

A build needs no network once ``build --prepare`` has made what it reads from outside the project's own
environment (Triton 2.51's config schema, generator/builder/stages/config/schema.py).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from generator.builder.pipeline import build_repository
from generator.builder.spec.declarations import add_arguments as add_option_arguments
from generator.builder.spec.declarations import from_args
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.errors import GeneratorError

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onnx", type=Path, default=None,
                        help="detector ONNX (default: the bundled demo detector)")
    parser.add_argument("--output", type=Path, default=Path("model_repository"), help="repository to write")
    parser.add_argument("--force", action="store_true", help="replace an --output this tool did not write")
    parser.add_argument("--version", metavar="N|next", default=None,
                        help="add version N (or 'next': the next free number) beside the versions of --output, in "
                             "one rename; the first becomes stable, later ones wait for `generator rollout`. "
                             "Default: 'next' when --output already holds versions, else one unversioned build")
    parser.add_argument("--prepare", action="store_true",
                        help="only prepare what a build needs from the network (Triton 2.51's config schema, from the "
                             "hash-pinned tritonclient 2.51 wheel), print where it is, and exit: for an image build "
                             "or before building on a machine without the network")
    parser.add_argument("--keep-versions", type=int, default=None, metavar="K",
                        help="versioned repositories: keep at most K versions, pruning the oldest (never the "
                             "stable one or the one before it); default: the repository's (3)")
    add_option_arguments(parser, BuildOptions)


def options_from_args(args: argparse.Namespace) -> BuildOptions:
    return from_args(BuildOptions, args)


def _versioned(args: argparse.Namespace, options: BuildOptions, onnx_path: Path) -> int | None:
    """Build a version when asked for one or when --output holds versions; None: an unversioned build."""
    from generator.builder.versioned import add_version
    from generator.repository.versions import parse_version, read_index

    if args.version is None and args.keep_versions is None and read_index(args.output) is None:
        return None
    version = parse_version(args.version) if args.version is not None else None
    result = add_version(onnx_path, args.output, options, version, args.keep_versions, force=args.force)
    role = "stable (the alias serves it)" if result.index.stable == result.version else "a candidate"
    logger.info("Built version %d of '%s' in %s as %s; versions %s", result.version, options.name, result.output,
                role, ", ".join(map(str, result.index.served)))
    return 0


def prepare() -> int:
    """``build --prepare``: make the schema file (logged when made), print where it is."""
    from generator.builder.stages.config.schema import prepare_schema
    from generator.server.embedded import TRITON_VERSION

    path, source = prepare_schema()
    if source is not None:
        logger.info("Prepared Triton %s's config schema from %s", TRITON_VERSION, source)
    print(f"Triton {TRITON_VERSION} config schema: {path}", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.prepare:
        return prepare()
    options = options_from_args(args)
    onnx_path = args.onnx or DEMO_ONNX
    if args.onnx is None and not DEMO_ONNX.exists():
        raise GeneratorError(f"the bundled demo detector is missing ({DEMO_ONNX}); pass --onnx PATH")
    if (code := _versioned(args, options, onnx_path)) is not None:
        return code
    result = build_repository(onnx_path, args.output, options, force=args.force)
    info = result.info
    logger.info("Built %s from %s: %s head, %d classes, input %dx%d, %s batch, target %s, precision %s",
                result.output, onnx_path.name, info.layout, info.num_classes, *info.image_size,
                "dynamic" if info.static_batch is None else f"static {info.static_batch}",
                options.target, options.precision)
    logger.info("Models: %s (ensemble '%s')", ", ".join(result.models), options.name)
    if options.classifier is not None:
        logger.info("Second stage: the first %d boxes per image cropped and classified by %s (at most %d classes per box in "
                    "detection_box_classes, detection_box_scores)", options.second_stage_boxes,
                    options.classifier.name, options.top_k)
    detector = result.manifest.detector
    if detector is not None and detector.nms_in_graph:
        logger.info("NMS runs in the detector graph (%s): the nms step maps [N, %d, 6] rows back",
                    detector.nms_placement, options.max_detections)
    elif detector is not None and detector.reduce_head:
        logger.info("The detector graph ends with the per-anchor class max/arg-max: NMS receives "
                    "[N, 6, anchors] (layout %s); --no-reduce-head serves the full head", detector.served_layout)
    return 0
