"""``build``: ONNX in, model repository out."""

from __future__ import annotations

import argparse
from pathlib import Path

from generator.build.options import PRECISIONS, TARGETS, BuildOptions, ImageLimitOptions
from generator.build.pipeline import GateOptions, build_repository
from generator.build.tensorrt.step import TensorRTOptions
from generator.demo import DEMO_ONNX
from generator.errors import GeneratorError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--onnx", type=Path, default=None,
                        help="detector ONNX (default: the bundled demo detector)")
    parser.add_argument("--output", type=Path, default=Path("model_repository"), help="repository to write")
    parser.add_argument("--target", choices=TARGETS, default="embedded", help="what the detector step becomes")
    parser.add_argument("--name", default="yolo", help="ensemble name; composing models are NAME_<step>")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--max-batch", type=int, default=8, help="max_batch_size of the composing models")
    parser.add_argument("--conf-threshold", type=float, default=0.25)
    parser.add_argument("--iou-threshold", type=float, default=0.45)
    parser.add_argument("--max-detections", type=int, default=100)
    parser.add_argument("--imgsz", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"), default=None,
                        help="input size for models with dynamic spatial axes (default: ONNX metadata)")
    parser.add_argument("--max-image-bytes", type=int, default=ImageLimitOptions.max_bytes)
    parser.add_argument("--max-image-pixels", type=int, default=ImageLimitOptions.max_pixels)
    parser.add_argument("--max-image-side", type=int, default=ImageLimitOptions.max_side)
    parser.add_argument("--no-reduced-decode", action="store_true",
                        help="always decode JPEGs at full resolution")
    parser.add_argument("--normalise-in", choices=("graph", "preprocess"), default="graph",
                        help="graph: uint8 images between steps, normalisation fused into the detector; "
                             "preprocess: float tensors from the Python step (slower, for comparison)")
    parser.add_argument("--no-reduce-head", action="store_true",
                        help="v8 heads: serve the full [N, 4+nc, A] head instead of fusing the per-anchor class "
                             "max/arg-max into the detector graph (which sends [N, 6, A] to the NMS step)")
    parser.add_argument("--queue-delay-us", type=int, default=BuildOptions.queue_delay_us,
                        help="dynamic batching max_queue_delay_microseconds")
    parser.add_argument("--instances", type=int, nargs=3, metavar=("PRE", "DET", "NMS"),
                        default=(BuildOptions.preprocess_instances, BuildOptions.detector_instances,
                                 BuildOptions.nms_instances),
                        help="instance counts of preprocess, detector, nms")
    parser.add_argument("--detector-threads", type=int, default=BuildOptions.detector_threads,
                        help="ONNX Runtime intra-op threads per embedded detector instance "
                             "(0: the host's cores divided by the detector instances)")
    parser.add_argument("--force", action="store_true", help="replace an --output this tool did not write")
    trt = parser.add_argument_group("TensorRT plan (--target tensorrt, on the serving GPU)")
    trt.add_argument("--opt-batch", type=int, default=None, help="profile opt batch (default: --max-batch)")
    trt.add_argument("--workspace-gib", type=float, default=4.0, help="builder workspace limit")
    trt.add_argument("--builder-optimization-level", type=int, default=3, choices=range(6))
    trt.add_argument("--hardware-compatibility", choices=("none", "ampere_plus"), default="none",
                     help="ampere_plus: one plan for every GPU of compute capability >= 8.0 (slower)")
    trt.add_argument("--version-compatible", action="store_true",
                     help="plan loadable by later TensorRT releases (lean runtime)")
    trt.add_argument("--cuda-graphs", action="store_true", help="enable CUDA graphs in the detector config")
    trt.add_argument("--triton-image", default=TensorRTOptions.triton_image,
                     help="Triton image that will serve the plan (recorded in the manifest)")
    precision = parser.add_argument_group("precision (FP16/INT8) and the accuracy gate")
    precision.add_argument("--calib-images", type=Path, default=None,
                           help="INT8 calibration images (default: synthetic scenes; use your own domain's)")
    precision.add_argument("--calib-count", type=int, default=128, help="calibration images to use")
    precision.add_argument("--calib-method", choices=("minmax", "entropy", "percentile"), default="minmax")
    precision.add_argument("--int8-exclude", nargs="*", default=(), metavar="NODE",
                           help="extra node names kept in float (the score head always is)")
    precision.add_argument("--fp16-keep", nargs="*", default=(), metavar="NODE",
                           help="extra node names kept in FP32 for --precision fp16")
    precision.add_argument("--no-validate", action="store_true",
                           help="skip the accuracy gate (recorded in the manifest)")
    precision.add_argument("--max-map-drop", type=float, default=None,
                           help="allowed mAP@0.5:0.95 drop in points (default: fp16 0.5, int8 1.5)")
    precision.add_argument("--validate-images", type=Path, default=None,
                           help="control images for the gate (default: labelled synthetic scenes)")
    precision.add_argument("--validate-labels", type=Path, default=None, help="COCO JSON for --validate-images")


def options_from_args(args: argparse.Namespace) -> BuildOptions:
    return BuildOptions(
        name=args.name,
        target=args.target,
        precision=args.precision,
        max_batch=args.max_batch,
        conf_threshold=args.conf_threshold,
        iou_threshold=args.iou_threshold,
        max_detections=args.max_detections,
        image_size=tuple(args.imgsz) if args.imgsz else None,
        limits=ImageLimitOptions(args.max_image_bytes, args.max_image_pixels, args.max_image_side),
        reduced_decode=not args.no_reduced_decode,
        normalise_in=args.normalise_in,
        reduce_head=not args.no_reduce_head,
        queue_delay_us=args.queue_delay_us,
        preprocess_instances=args.instances[0],
        detector_instances=args.instances[1],
        nms_instances=args.instances[2],
        detector_threads=args.detector_threads,
    )


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    onnx_path = args.onnx or DEMO_ONNX
    if args.onnx is None and not DEMO_ONNX.exists():
        raise GeneratorError(f"the bundled demo detector is missing ({DEMO_ONNX}); pass --onnx PATH")
    transform = None
    if options.precision != "fp32":
        from generator.build.precision.step import PrecisionOptions, make_precision_transform

        transform = make_precision_transform(PrecisionOptions(
            calib_images=args.calib_images, calib_count=args.calib_count, calib_method=args.calib_method,
            int8_exclude=tuple(args.int8_exclude), fp16_keep_nodes=tuple(args.fp16_keep),
        ))
    gate = GateOptions(enabled=not args.no_validate, max_drop_points=args.max_map_drop,
                       images=args.validate_images, labels=args.validate_labels)
    tensorrt = TensorRTOptions(
        opt_batch=args.opt_batch, workspace_gib=args.workspace_gib,
        optimization_level=args.builder_optimization_level, hardware_compatibility=args.hardware_compatibility,
        version_compatible=args.version_compatible, cuda_graphs=args.cuda_graphs, triton_image=args.triton_image,
    )
    result = build_repository(onnx_path, args.output, options, force=args.force,
                              precision_transform=transform, gate=gate, tensorrt=tensorrt)
    info = result.info
    print(f"Built {result.output} from {onnx_path.name}: {info.layout} head, {info.num_classes} classes, "
          f"input {info.image_size[0]}x{info.image_size[1]}, "
          f"{'dynamic' if info.static_batch is None else f'static {info.static_batch}'} batch, "
          f"target {options.target}, precision {options.precision}")
    print(f"Models: {', '.join(result.models)} (ensemble '{options.name}')")
    detector = result.manifest.get("detector")
    if isinstance(detector, dict) and detector.get("reduce_head"):
        print("The detector graph ends with the per-anchor class max/arg-max: NMS receives "
              f"[N, 6, anchors] (layout {detector['served_layout']}); --no-reduce-head serves the full head")
    return 0
