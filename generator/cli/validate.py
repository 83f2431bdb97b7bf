"""``validate``: the accuracy gate on a built repository, in-process and optionally through Triton."""

from __future__ import annotations

import argparse
from pathlib import Path

from generator.builder.stages.gate import accuracy_gate
from generator.errors import GeneratorError
from generator.evaluation import layerwise
from generator.evaluation.gate import ensure_passed, gate_summary, load_control_set, report_files
from generator.evaluation.task_validation import METRICS
from generator.model.onnx_inspect import DetectorInfo, inspect_onnx
from generator.repository.manifest import DetectorRecord, Manifest

# ONNX Runtime's providers for --provider, first choice first.
PROVIDERS = {"cpu": ("CPUExecutionProvider",), "cuda": ("CUDAExecutionProvider",),
             "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--images", type=Path, default=None,
                        help="control images (default: labelled synthetic scenes, meaningful for the demo only)")
    parser.add_argument("--labels", type=Path, default=None,
                        help="COCO JSON for --images (default: FP32 detections as pseudo-labels); for a segment, "
                        "pose or obb build a folder of YOLO txt labels (default: 'labels' beside an 'images' folder)")
    parser.add_argument("--max-map-drop", type=float, default=None,
                        help="allowed mAP@0.5:0.95 drop in points (default: fp16 0.5, int8 1.5)")
    parser.add_argument("--reference-onnx", type=Path, default=None,
                        help="the FP32 source ONNX (default: the path recorded in the manifest)")
    parser.add_argument("--count", type=int, default=64, help="synthetic control images when no --images")
    parser.add_argument("--version", type=int, default=None,
                        help="versioned repositories: the version to validate (default: the stable one)")
    parser.add_argument("--url", default=None,
                        help="also run the control set through a running Triton (grpc://host:port or http://...)")
    parser.add_argument("--layerwise", action="store_true",
                        help="also compare every intermediate tensor of the served graph with the FP32 reference "
                        "and name the layers where the error starts (layerwise.md / layerwise.json)")
    parser.add_argument("--layerwise-count", type=int, default=8, metavar="N",
                        help="control images the layer-wise run uses (it keeps every tensor of both graphs)")
    parser.add_argument("--provider", choices=tuple(PROVIDERS), default="cpu",
                        help="where --layerwise runs the served graph (the FP32 reference runs on the CPU): "
                        "cpu, cuda or tensorrt (ONNX Runtime's providers; on the GPU host)")


def _build_record(repository: Path, version: int | None) -> tuple[Path, Manifest, Path]:
    """The manifest to validate, the folder its reports go to, and the detector ONNX it serves."""
    from generator.repository.versions import served_manifest

    manifest = served_manifest(repository, version)
    # A version's records sit beside its ensemble config (NAME_vN/), an unversioned build's at the root.
    folder = repository / manifest.name if manifest.version is not None else repository
    return folder, manifest, repository / f"{manifest.name}_detector" / str(manifest.version or 1) / "model.onnx"


def run(args: argparse.Namespace) -> int:
    repository: Path = args.model_repository
    reports, manifest, candidate = _build_record(repository, args.version)
    reference_onnx = args.reference_onnx or Path(manifest.source_onnx_path or "")
    if not reference_onnx.is_file():
        raise GeneratorError(f"FP32 reference ONNX not found at {reference_onnx}; pass --reference-onnx PATH")
    if not candidate.is_file():
        raise GeneratorError(
            f"{candidate} not found: the in-process gate runs ONNX detectors; for a TensorRT plan validate "
            "through the server with --url on the GPU host"
        )
    detector = manifest.detector or DetectorRecord()
    info = inspect_onnx(reference_onnx, detector.image_size)
    if info.task == "classify":
        return _validate_classifier(args, reports, manifest.name, candidate, info)
    if info.task in METRICS:
        return _validate_task(args, reports, manifest, candidate, info)
    control = load_control_set(args.images, args.labels, args.count)
    thresholds = manifest.thresholds
    # Repositories built before the class reduction record no served layout: they serve the ONNX's own.
    served_layout = detector.served_layout or info.layout
    report = accuracy_gate(reference_onnx, candidate, info, served_layout, manifest.precision, control,
                           args.max_map_drop, thresholds.iou, thresholds.max_detections)
    for name, content in report_files(report).items():
        (reports / name).write_bytes(content)
    print(gate_summary(report))
    print(f"Report: {reports / 'validation.md'}")
    diagnosis = _layerwise(args, reports, manifest, reference_onnx, candidate, control.data, info.image_size)
    if args.url:
        from generator.operate.served_check import served_vs_reference

        served, local = served_vs_reference(args.url, manifest.name, reference_onnx, info, control,
                                            thresholds.conf, thresholds.iou, thresholds.max_detections)
        print(f"through Triton at {args.url}: mAP@0.5:0.95 {served.map50_95:.4f} "
              f"(FP32 in-process at the served thresholds: {local.map50_95:.4f})")
    ensure_passed(report, layerwise.summary(diagnosis) if diagnosis else None)
    return 0


def _validate_classifier(args: argparse.Namespace, reports: Path, name: str, candidate: Path,
                         info: DetectorInfo) -> int:
    """Top-1 and top-5 accuracy on ``--images`` (one folder per class), in-process and through ``--url``. An
    FP32 classifier has no lower precision to gate; the numbers are measured, not judged."""
    from generator.evaluation import classify

    if args.images is None or args.labels is not None or args.layerwise:
        raise GeneratorError("a classification build is validated on --images DIR with one folder per class "
                             "(Ultralytics' val/<class>/ layout); --labels and --layerwise are for detectors")
    labelled = classify.class_folders(args.images, info.class_names)
    local = classify.accuracy(classify.top_in_process(candidate, labelled.images, info.image_size),
                              labelled.labels)
    print(local.line("in-process"))
    served = None
    if args.url:
        from generator.operate.served_check import served_top_classes

        served = classify.accuracy(served_top_classes(args.url, name, labelled.images), labelled.labels)
        print(served.line(f"through Triton at {args.url}"))
    (reports / "classification.json").write_bytes(classify.report(local, served))
    print(f"Report: {reports / 'classification.json'}")
    return 0


def _validate_task(args: argparse.Namespace, reports: Path, manifest: Manifest, candidate: Path,
                   info: DetectorInfo) -> int:
    """Segment, pose and obb: box and task mAP on --images with YOLO txt labels, in-process over the whole
    precision-recall curve and, with ``--url``, through Triton beside in-process at the served thresholds. Measured,
    not judged, like a classifier's accuracy."""
    from generator.evaluation import task_validation as tv
    from generator.evaluation.gate import MAP_CONF_THRESHOLD
    from generator.evaluation.yolo_labels import labels_folder

    if args.images is None or args.layerwise:
        raise GeneratorError(f"a {info.task} build is validated on --images DIR with YOLO txt labels (--labels DIR, "
                             "default the 'labels' folder beside 'images'); --layerwise is for detectors")
    labelled = tv.labelled_set(args.images, labels_folder(args.images, args.labels), info.task, info.kpt_shape)
    thresholds = manifest.thresholds
    decode = (manifest.detector or DetectorRecord()).reduced_decode is not False

    def in_process(conf: float) -> tv.TaskScores:
        found = tv.predictions_in_process(candidate, info, labelled.images, conf, thresholds.iou,
                                          thresholds.max_detections, decode)
        return tv.score(info.task, labelled.labels, found, info.kpt_shape)

    local = in_process(MAP_CONF_THRESHOLD)
    print(local.line("in-process"))
    served = served_local = None
    if args.url:
        from generator.operate.served_check import served_task_predictions

        answers = served_task_predictions(args.url, manifest.name, labelled.images)
        served = tv.score(info.task, labelled.labels, answers, info.kpt_shape)
        served_local = in_process(thresholds.conf)
        print(served.line(f"through Triton at {args.url}"))
        print(served_local.line(f"in-process at the served thresholds (conf {thresholds.conf})"))
    (reports / "validation_task.json").write_bytes(tv.report(local, served, served_local))
    print(f"Report: {reports / 'validation_task.json'}")
    return 0


def _layerwise(args: argparse.Namespace, reports: Path, manifest: Manifest, reference_onnx: Path, candidate: Path,
               images: list[bytes], image_size: tuple[int, int]) -> layerwise.LayerwiseReport | None:
    """``--layerwise``: the served graph's tensors against the FP32 reference's, as a table and JSON."""
    if not args.layerwise:
        return None
    import onnx
    import onnxruntime

    providers = PROVIDERS[args.provider]
    if providers[0] not in onnxruntime.get_available_providers():
        raise GeneratorError(f"--provider {args.provider}: this ONNX Runtime has no {providers[0]} (it has "
                             f"{', '.join(onnxruntime.get_available_providers())}); run on the GPU host with "
                             "onnxruntime-gpu")
    if args.layerwise_count < 1:
        raise GeneratorError(f"--layerwise-count must be at least 1, got {args.layerwise_count}")
    diagnosis = layerwise.compare_layers(
        onnx.load(str(reference_onnx)), onnx.load(str(candidate)), images[: args.layerwise_count], image_size,
        manifest.precision, layerwise.decisions_from_facts(manifest.precision_facts), providers)
    for name, content in layerwise.report_files(diagnosis).items():
        (reports / name).write_bytes(content)
    print(diagnosis.to_markdown(rows=0).split("\n## All layers")[0])
    print(layerwise.summary(diagnosis))
    print(f"Layer-wise report: {reports / 'layerwise.md'} (every layer: layerwise.json)")
    return diagnosis
