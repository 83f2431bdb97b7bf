"""Build options, each declared once: its flag, help, allowed values and default live on its field.

The CLI parser, validation, the manifest record and the exact rebuild command are all generated from these
declarations (``generator.builder.spec.declarations``), so a new option cannot be half-wired. Impossible values and
combinations fail here, before anything is written.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from generator.builder.spec.declarations import check_declared, option
from generator.errors import GeneratorError
from generator.serving.contract import OPENCV_PIXEL_LIMIT, STEPS, step_model_name

Target = Literal["embedded", "onnxruntime", "tensorrt"]
Precision = Literal["fp32", "fp16", "int8"]
NormaliseIn = Literal["graph", "preprocess"]
CalibrationMethod = Literal["minmax", "entropy", "percentile"]
Int8Tool = Literal["ort", "modelopt"]
Int8Float = Literal["auto", "fp16", "fp32"]
SpeedGateMode = Literal["keep-faster", "record", "off"]
HardwareCompatibility = Literal["none", "ampere_plus", "same_compute_capability"]
Device = Literal["cpu", "gpu"]
DetectorSpin = Literal["off", "run", "alone"]
CpuEngine = Literal["onnxruntime", "openvino"]
GpuHandoff = Literal["auto", "device", "host"]
FuseMode = Literal["auto", "on", "off"]
TARGETS: tuple[Target, ...] = ("embedded", "onnxruntime", "tensorrt")
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "int8")
# TensorRT's TopK takes K below 3840 (onnx-tensorrt operators.md); the in-graph NMS keeps max_det by TopK.
NMS_IN_GRAPH_MAX_DETECTIONS = 3839
# Triton model names become directory names and pbtxt strings: keep them boring.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class SpecError(GeneratorError):
    """A build option is invalid; the message names the option."""


def validate_model_name(name: str) -> str:
    if not _NAME.fullmatch(name):  # match() would let "yolo\n" through: "$" matches before a final newline
        raise SpecError(
            f"invalid --name {name!r}: use 1-64 letters, digits, '_' or '-', starting with a letter "
            "(it becomes a directory and a Triton model name)"
        )
    return name


@dataclass(frozen=True)
class ImageLimitOptions:
    """Per-image limits the preprocess step checks from the header, before decoding."""

    max_bytes: int = option(32 * 1024 * 1024, "--max-image-bytes", "largest encoded image accepted", low=1)
    # OpenCV's own limit in the serving environment is the backstop behind this one, so it cannot be larger.
    max_pixels: int = option(40_000_000, "--max-image-pixels", "largest width x height accepted", low=1,
                             high=OPENCV_PIXEL_LIMIT)
    max_side: int = option(16384, "--max-image-side", "largest width or height accepted", low=1)
    max_jpeg_scans: int = option(64, "--max-jpeg-scans", "most scans a progressive JPEG may have (each one is "
                                 "another pass over the image)", low=1, high=10_000)
    max_decode_ms: float | None = option(
        None, "--max-decode-ms", "reject an image whose estimated decode time on the build machine exceeds "
        "this (default: --max-queue-ms when given, else 250; 0: no decode budget)", low=0.0, high=600_000.0)

    def __post_init__(self) -> None:
        check_declared(self, SpecError)


@dataclass(frozen=True)
class PrecisionOptions:
    """How FP16/INT8 graphs are made (``generator.builder.stages.precision``)."""

    calib_images: Path | None = option(
        None, "--calib-images", "INT8 calibration images: a folder of your own domain's images (required for "
        "--precision int8 unless the model is the bundled demo)", group="precision")
    calib_count: int = option(128, "--calib-count", "calibration images to use", low=1, high=100_000,
                              group="precision")
    calib_method: CalibrationMethod = option("minmax", "--calib-method", "activation range estimator",
                                             group="precision")
    int8_exclude: tuple[str, ...] = option((), "--int8-exclude", "extra node names kept in float "
                                           "(the score head always is)", nargs="*", metavar="NODE",
                                           group="precision")
    int8_tool: Int8Tool = option("ort", "--int8-tool", "what places the INT8 Q/DQ: ort (ONNX Runtime's quantizer "
                                 "configured like Model Optimizer) or modelopt (NVIDIA Model Optimizer; "
                                 "pip install '.[int8-modelopt]', brings torch)", group="precision")
    int8_float: Int8Float = option("auto", "--int8-float", "type of the layers INT8 leaves unquantized (the "
                                   "head tail stays fp32); auto: fp16, but fp32 for --target onnxruntime, "
                                   "whose ONNX Runtime before 1.32 truncates FP16 QuantizeLinear on the CPU",
                                   group="precision")
    fp16_keep: tuple[str, ...] = option((), "--fp16-keep", "extra node names kept in FP32 for --precision fp16",
                                        nargs="*", metavar="NODE", group="precision")
    auto_keep: int = option(0, "--auto-keep", "on a failed accuracy gate, keep up to N more layers out of the "
                            "lower precision, those the layer-wise diagnosis finds adding the most error, two per "
                            "re-check (recorded in the manifest and the rebuild command)", low=0, high=64,
                            group="precision")

    def __post_init__(self) -> None:
        check_declared(self, SpecError)
        if self.int8_tool == "modelopt" and self.calib_method == "percentile":
            raise SpecError("--int8-tool modelopt calibrates with --calib-method minmax or entropy, not percentile")


@dataclass(frozen=True)
class GateOptions:
    """The accuracy gate ``build`` runs for FP16/INT8 before anything is written."""

    enabled: bool = option(True, "--no-validate", "skip the accuracy gate (recorded in the manifest)",
                           negate=True, group="precision")
    max_drop_points: float | None = option(
        None, "--max-map-drop", "allowed mAP@0.5:0.95 drop in points (default: fp16 0.5, int8 1.5)",
        low=-100.0, high=100.0, group="precision")
    images: Path | None = option(None, "--validate-images", "control images for the gate (required for a "
                                 "model other than the bundled demo, or pass --no-validate)", group="precision")
    labels: Path | None = option(None, "--validate-labels", "COCO JSON for --validate-images", group="precision")
    count: int = option(64, "--validate-count", "control images to use", low=1, high=100_000, group="precision")
    speed_gate: SpeedGateMode = option(
        "keep-faster", "--speed-gate", "after the accuracy gate, time fp16/int8 against fp32 where the build can "
        "run the detector (ONNX Runtime on the CPU, or CUDA for --device gpu): keep-faster serves fp32 unless the "
        "lower precision is --speed-margin faster; record only records (forces the precision); off skips it",
        group="precision")
    speed_margin: float = option(5.0, "--speed-margin", "percent faster than fp32 a lower precision must be",
                                 low=0.0, high=100.0, group="precision")

    def __post_init__(self) -> None:
        check_declared(self, SpecError)
        if self.labels is not None and self.images is None:
            raise SpecError("--validate-labels needs --validate-images")


@dataclass(frozen=True)
class TensorRTOptions:
    """The plan build of ``--target tensorrt`` (``generator.builder.stages.tensorrt``)."""

    opt_batch: int | None = option(None, "--opt-batch", "profile opt batch (default: --max-batch)", low=1,
                                   high=1024, group="tensorrt")
    workspace_gib: float = option(4.0, "--workspace-gib", "builder workspace limit", low=0.25, high=1024.0,
                                  group="tensorrt")
    optimization_level: int = option(3, "--builder-optimization-level", "TensorRT builder optimization level",
                                     low=0, high=5, group="tensorrt")
    hardware_compatibility: HardwareCompatibility = option(
        "none", "--hardware-compatibility", "ampere_plus: one plan for every GPU of compute capability >= 8.0; "
        "same_compute_capability: every GPU of this one's (both slower)", group="tensorrt")
    version_compatible: bool = option(False, "--version-compatible", "plan loadable by later TensorRT releases "
                                      "(Triton then needs --backend-config=tensorrt,version-compatible=true)",
                                      group="tensorrt")
    cuda_graphs: bool = option(False, "--cuda-graphs", "enable CUDA graphs in the detector config",
                               group="tensorrt")
    triton_image: str = option("nvcr.io/nvidia/tritonserver:26.08-py3", "--triton-image",
                               "Triton image that will serve the plan (recorded in the manifest)", group="tensorrt")
    timeout_s: float = option(3600.0, "--tensorrt-timeout-s", "give up on a plan build after this long",
                              low=1.0, high=86_400.0, group="tensorrt")
    # A plan only loads on the TensorRT and GPU that built it, so the repository can be made anywhere and
    # the plan added on the serving host: `python -m generator plan REPOSITORY` there.
    defer_plan: bool = option(False, "--defer-plan", "write everything but model.plan (served ONNX, build spec, "
                              "configs, warmup data) without TensorRT; complete it on the GPU host with "
                              "`python -m generator plan REPOSITORY`", group="tensorrt")

    def __post_init__(self) -> None:
        check_declared(self, SpecError)


@dataclass(frozen=True)
class BuildOptions:
    """Everything that decides what ``build`` writes; the manifest records it and can rebuild from it."""

    name: str = option("yolo", "--name", "ensemble name; composing models are NAME_<step>")
    target: Target = option("embedded", "--target", "what the detector step becomes")
    # None: the target's own device (embedded: CPU, onnxruntime: CPU, tensorrt: GPU). "gpu" on embedded: ONNX
    # Runtime's CUDA provider inside the Python backend (needs onnxruntime-gpu where Triton runs).
    device: Device | None = option(None, "--device", "where the detector runs: embedded and onnxruntime cpu "
                                   "(default) or gpu (embedded: ONNX Runtime's CUDA provider, needs onnxruntime-gpu "
                                   "where Triton runs); tensorrt is always gpu")
    ort_tensorrt: bool = option(False, "--ort-tensorrt", "onnxruntime --device gpu: run the graph through "
                                "ONNX Runtime's TensorRT execution provider (engine cache, precision from the "
                                "graph) instead of CUDA alone")
    ort_engine_cache: str = option("/tmp/triton-ort-trt-engines", "--ort-engine-cache", "where the serving "
                                   "container keeps --ort-tensorrt engines (a writable path there)")
    precision: Precision = option("fp32", "--precision", "graph precision (FP16/INT8 pass an accuracy gate)")
    max_batch: int = option(8, "--max-batch", "max_batch_size of the composing models", low=1, high=1024)
    conf_threshold: float = option(0.25, "--conf-threshold", "minimum score kept by NMS", low=0.0, below=1.0)
    iou_threshold: float = option(0.45, "--iou-threshold", "NMS overlap threshold", above=0.0, high=1.0)
    max_detections: int = option(100, "--max-detections", "boxes returned per image (outputs are padded)",
                                 low=1, high=10000)
    top_k: int = option(5, "--top-k", "classification exports: the best classes returned per image (at most the "
                        "class count)", low=1, high=10000)
    # A second stage (issue 34): the crop of every kept box classified by an Ultralytics classify export, in its
    # own steps of the same ensemble (generator.builder.second_stage).
    classifier: Path | None = option(None, "--classifier", "two-stage build: an Ultralytics classify export (ONNX) "
                                     "run on the crop of each kept box (Ultralytics' save_one_box); adds the "
                                     "per-box top --top-k classes and scores to the detections")
    classify_boxes: int = option(20, "--classify-boxes", "two-stage build: the best-scoring boxes per image that "
                                 "are classified (at most --max-detections); the boxes past them keep their "
                                 "detection and get zero classifier rows", low=1, high=1000)
    image_size: tuple[int, int] | None = option(
        None, "--imgsz", "input size for models with dynamic spatial axes (default: ONNX metadata)",
        nargs=2, metavar=("HEIGHT", "WIDTH"), low=32, high=8192)
    limits: ImageLimitOptions = field(default_factory=ImageLimitOptions)
    reduced_decode: bool = option(True, "--no-reduced-decode", "always decode JPEGs at full resolution "
                                  "(pixel parity with Ultralytics' own pipeline)", negate=True)
    # "graph": uint8 images travel between steps and the detector graph normalises (fast);
    # "preprocess": the Python step sends float NCHW tensors (the straightforward design, for comparison).
    normalise_in: NormaliseIn = option("graph", "--normalise-in", "graph: uint8 images between steps, "
                                       "normalisation fused into the detector; preprocess: float tensors from "
                                       "the Python step (slower, for comparison)")
    # "gpu": the preprocess instances run on the GPU (nvImageCodec decode, CuPy letterbox) and hand the detector
    # their batch as --gpu-handoff says (generator.serving.gpu); needs the `gpu` extra where Triton runs.
    preprocess_device: Device = option("cpu", "--preprocess-device", "gpu: decode JPEGs in batches with "
                                                 "nvImageCodec and letterbox on the GPU; --gpu-handoff says how the "
                                                 "detector gets them (needs pip install '.[gpu]' where Triton runs)")
    # How the GPU preprocess's batch reaches the next step: "device", one GPU tensor per request, which the Python
    # backend hands over through Triton's CUDA pool one by one on each side; "host", the batch copied to host
    # memory once and sent as host tensors (a GPU detector copies its batch to the GPU again). "auto": host for the
    # embedded (Python-backend) detector, where the device hand-off served 15 % fewer images (H100, issue 35,
    # docs/PERFORMANCE.md; its wrong answers under load were the runner's missing wait for CuPy's stream, fixed);
    # device for the native backends (TensorRT, ONNX Runtime), which read a GPU tensor in place.
    gpu_handoff: GpuHandoff = option("auto", "--gpu-handoff", "with --preprocess-device gpu and separate steps "
                                     "(--fuse-preprocess off; given, auto does not fuse): 'device' hands each "
                                     "request's images to the next step in GPU memory; 'host' copies the batch to "
                                     "host memory once and hands host tensors over; 'auto': host for --target "
                                     "embedded, device otherwise")
    # One Python step for preprocess and detector (serving/models/detector_fused.py): the batch goes from the decoder
    # to the session in one process, on the GPU without leaving device memory. "auto": on where it was measured to
    # win, the GPU preprocess in front of the embedded GPU detector (H100: 1.35-1.45x the three steps' images/s, 73-79 %
    # of the engine alone; issue 35, docs/PERFORMANCE.md), unless --gpu-handoff asks for separate steps; on the CPU
    # it saved 1-3 % of a lone request, within the shared machine's noise, so the ensemble of three steps stays.
    fuse_preprocess: FuseMode = option("auto", "--fuse-preprocess", "--target embedded: 'on' decodes, letterboxes and "
                                       "runs the detector in one step (the preprocess step's code and checks, no "
                                       "hand-off between them; on the GPU the batch stays in device memory); "
                                       "'auto': on with --preprocess-device gpu --device gpu, off otherwise")
    # NMS as ONNX NonMaxSuppression at the end of the detector graph (generator.builder.stages.graph.nms): TensorRT runs it
    # on the GPU, ONNX Runtime on the CPU; the Python nms step then only maps boxes back.
    nms_in_graph: bool = option(False, "--nms-in-graph", "run class-aware NMS inside the detector graph (ONNX "
                                "NonMaxSuppression, padded to --max-detections); the nms step only maps boxes back")
    # Where NMS runs by default is decided per target and head (generator.builder.stages.graph.placement): in the
    # graph with TensorRT, in the Python step on ONNX Runtime. This keeps it in the Python step on TensorRT too.
    python_nms: bool = option(False, "--python-nms", "keep class-aware NMS in the Python nms step with --target "
                              "tensorrt (default there: in the detector graph, on the GPU)")
    reduce_head: bool = option(True, "--no-reduce-head", "v8 heads: serve the full [N, 4+nc, A] head instead "
                               "of fusing the per-anchor class max/arg-max into the detector graph", negate=True)
    # No waiting by default: on a busy CPU requests queue up behind the running batch anyway, and a
    # delay only adds latency at low load (measured: ~2 ms per step at concurrency 1).
    queue_delay_us: int = option(0, "--queue-delay-us", "dynamic batching max_queue_delay_microseconds",
                                 low=0, high=10_000_000)
    # Overload is shed from a latency budget (generator.builder.stages.admission): no step holds a request longer
    # than this, and each step queues only what the pipeline serves in about that time; the rest is
    # rejected at once with UNAVAILABLE. None: derived from the measured service time (an explicit value is an SLA).
    max_queue_ms: float | None = option(
        None, "--max-queue-ms", "longest a request may wait in a step's queue (your SLA); each step queues what "
        "the pipeline serves in that time and rejects the rest at once (UNAVAILABLE); default: the batch "
        "running plus two queued, under load, from the measured service time, at least 250", low=1.0, high=600_000.0)
    service_ms: float | None = option(
        None, "--service-ms", "time one batch of --max-batch images takes through the three steps on the "
        "serving machine (default: measured on this machine during the build; give it for GPU targets)",
        above=0.0, high=600_000.0)
    # None: two instances of every step. Embedded on the CPU, each detector session gets every core (issue 27): a
    # lone request still runs on the whole machine (issue 17: single-threaded instances doubled its time) and a
    # second request runs beside the first instead of behind it. On a GPU one instance's copies overlap the
    # other's compute. Two of every Python step because of Triton's dynamic batcher (generator/builder/stages/
    # config/stranding.py): with a queue policy, a request queued behind a step's only instance can wait for the
    # next request to arrive, up to 500 ms, after that instance is free. Triton's ONNX Runtime backend on the CPU
    # keeps one detector instance (its sessions spin: two would each take every core).
    instances: tuple[int, int, int] | None = option(
        None, "--instances", "instance counts of preprocess, detector, nms (default: 2 2 2; 2 1 2 for --target "
        "onnxruntime on the CPU)", nargs=3, metavar=("PRE", "DET", "NMS"), low=1, high=64)
    # ONNX Runtime intra-op threads per detector instance. Embedded, 0: every core for each of the default two
    # instances (their sessions do not spin: two at once share the cores), cores / instances with --instances.
    # --target onnxruntime: the backend's intra_op_thread_count (pipeline.onnxruntime_thread_parameters).
    detector_threads: int = option(0, "--detector-threads", "ONNX Runtime intra-op threads per detector "
                                   "instance (embedded, 0: every core for each of the default instances, the "
                                   "host's cores divided by the detector instances with --instances; --target "
                                   "onnxruntime: the backend's intra_op_thread_count, 0: ONNX Runtime's default, "
                                   "every physical core of the host per instance)",
                                   low=0, high=1024)
    # Off: spinning workers burn the cores the Python steps need and lose their time slices on a shared machine
    # (docs/PERFORMANCE.md); on: ONNX Runtime's own default, a few percent faster on a host the detector has to itself.
    detector_spinning: bool = option(False, "--detector-spinning", "embedded CPU detector: let ONNX Runtime's "
                                     "intra-op workers spin between operators (its own default; off: they sleep)")
    # run: the workers spin between operators but stop when the last concurrent Run returns
    # (ONNX Runtime's session.force_spinning_stop), so the cores are free between requests (issue 35).
    # alone: as run for a run that finds no other detector instance running, else sleeping (serving/activity.py).
    detector_spin: DetectorSpin = option("off", "--detector-spin", "embedded CPU detector: 'run' lets ONNX "
                                         "Runtime's intra-op workers spin only while a run lasts (they stop "
                                         "when the last concurrent run returns); 'alone': only for a run that "
                                         "finds no other detector instance running (two sessions per "
                                         "instance); 'off': they sleep")
    # openvino: the same served graph on OpenVINO's CPU plugin (f32), checked against ONNX Runtime's detections on
    # the build's control images at load (generator/serving/openvino_runner.py, docs/PERFORMANCE.md, issue 35).
    cpu_engine: CpuEngine = option("onnxruntime", "--cpu-engine", "embedded CPU detector: the engine that runs "
                                   "the served graph, 'onnxruntime' or 'openvino' (OpenVINO's CPU plugin at f32, "
                                   "served from the openvino stub environment)")
    calibration: PrecisionOptions = field(default_factory=PrecisionOptions)
    gate: GateOptions = field(default_factory=GateOptions)
    tensorrt: TensorRTOptions = field(default_factory=TensorRTOptions)

    def __post_init__(self) -> None:
        validate_model_name(self.name)
        check_declared(self, SpecError)
        for flag, value in (("--conf-threshold", self.conf_threshold), ("--iou-threshold", self.iou_threshold)):
            if math.isnan(value):
                raise SpecError(f"{flag} must be a number, got nan")
        if self.nms_in_graph and self.max_detections > NMS_IN_GRAPH_MAX_DETECTIONS:
            raise SpecError(f"--nms-in-graph keeps at most {NMS_IN_GRAPH_MAX_DETECTIONS} detections per image "
                            f"(TensorRT's TopK limit), not {self.max_detections}; lower --max-detections or drop "
                            "--nms-in-graph")
        if self.detector_spinning and self.detector_spin != "off":
            raise SpecError(f"--detector-spinning (spin always) and --detector-spin {self.detector_spin} (spin "
                            "only while a run lasts) contradict each other: give one")
        if self.nms_in_graph and self.python_nms:
            raise SpecError("--nms-in-graph and --python-nms contradict each other: give one")
        self._check_target_fields()

    def _check_target_fields(self) -> None:
        """Devices and engines each target can use (Triton refuses the rest when it loads the model)."""
        if self.target == "tensorrt" and self.device == "cpu":
            raise SpecError("--target tensorrt runs on the GPU only (Triton's TensorRT backend refuses KIND_CPU); "
                            "use --target onnxruntime --device cpu for a CPU server")
        if self.ort_tensorrt and (self.target != "onnxruntime" or self.device != "gpu"):
            raise SpecError("--ort-tensorrt is ONNX Runtime's TensorRT execution provider on a GPU: "
                            "use it with --target onnxruntime --device gpu")
        if self.detector_spin != "off" and self.detector_device == "gpu":
            raise SpecError(f"--detector-spin {self.detector_spin} sets the workers of the CPU detector's session: the "
                            "detector runs on the GPU here (--device gpu)")
        if self.detector_spin != "off" and self.target != "embedded":
            raise SpecError(f"--detector-spin {self.detector_spin} sets the embedded detector's session (ONNX "
                            "Runtime in the Python backend): use it with --target embedded")
        if self.cpu_engine != "onnxruntime":
            self._check_cpu_engine()
        if self.gpu_handoff != "auto" and self.preprocess_device != "gpu":
            raise SpecError(f"--gpu-handoff {self.gpu_handoff} sets how the GPU preprocess hands its images over: "
                            "use it with --preprocess-device gpu")
        if self.fuse_preprocess == "on":
            self._check_fused()
        if self.classifier is not None:
            self._check_second_stage()
        if self.tensorrt.defer_plan and self.target != "tensorrt":
            raise SpecError("--defer-plan leaves the TensorRT plan to build later: use it with --target tensorrt")

    def _check_cpu_engine(self) -> None:
        """Another CPU engine runs the embedded CPU detector's graph in the Python backend, without ONNX Runtime's
        session settings."""
        engine = f"--cpu-engine {self.cpu_engine}"
        if self.target != "embedded" or self.detector_device != "cpu":
            raise SpecError(f"{engine} runs the embedded CPU detector (the Python backend): use it with --target "
                            "embedded and without --device gpu")
        if self.detector_spinning or self.detector_spin != "off":
            raise SpecError(f"{engine}: --detector-spinning and --detector-spin set ONNX Runtime's workers; give one")
        if self.classifier is not None:
            raise SpecError(f"{engine} runs one detector: drop --classifier (its crops run on ONNX Runtime)")
        if self.normalise_in != "graph":
            raise SpecError(f"{engine} is checked against ONNX Runtime's detections on the build's uint8 control "
                            "images at load: drop --normalise-in preprocess")

    def _check_fused(self) -> None:
        """A fused preprocess and detector is one Python step: the embedded detector, uint8 images, one stage."""
        if self.target != "embedded":
            raise SpecError(f"--fuse-preprocess runs the detector inside the Python step: --target {self.target} "
                            "serves it on its own backend; use --target embedded")
        if self.gpu_handoff != "auto":
            raise SpecError(f"--gpu-handoff {self.gpu_handoff} sets how the preprocess hands its images to a separate "
                            "detector step: --fuse-preprocess has none; give one")
        if self.normalise_in != "graph":
            raise SpecError("--fuse-preprocess hands the detector uint8 images: drop --normalise-in preprocess")
        if self.classifier is not None:
            raise SpecError("--fuse-preprocess serves one detector: drop --classifier (two-stage builds keep their "
                            "steps apart)")

    def _check_second_stage(self) -> None:
        """What a two-stage build (--classifier) supports today; the rest is refused by name."""
        if self.normalise_in != "graph":
            raise SpecError("--classifier sends uint8 crops to the classifier graph, which normalises them: drop "
                            "--normalise-in preprocess")

    @property
    def second_stage_boxes(self) -> int:
        """The boxes per image a two-stage build classifies: --classify-boxes, at most --max-detections."""
        return min(self.classify_boxes, self.max_detections)

    @property
    def preprocess_handoff(self) -> Literal["device", "host"] | None:
        """How the GPU preprocess hands its images over (``--gpu-handoff``, "auto" resolved); None on the CPU."""
        if self.preprocess_device != "gpu":
            return None
        if self.fused:  # no hand-off: the batch stays where the detector runs
            return "host" if self.detector_device == "cpu" else "device"
        if self.gpu_handoff != "auto":
            return self.gpu_handoff
        return "host" if self.target == "embedded" else "device"

    @property
    def fused(self) -> bool:
        """Whether preprocess and detector are one step (``--fuse-preprocess``, "auto" resolved; a versioned build
        resolves "auto" to off in ``pipeline.build_files``)."""
        if self.fuse_preprocess != "auto":
            return self.fuse_preprocess == "on"
        return (self.target == "embedded" and self.preprocess_device == "gpu" and self.detector_device == "gpu"
                and self.gpu_handoff == "auto" and self.classifier is None and self.normalise_in == "graph")

    @property
    def detector_device(self) -> Device:
        """The device the detector's instances run on."""
        if self.device is not None:
            return self.device
        return "gpu" if self.target == "tensorrt" else "cpu"

    @property
    def model_names(self) -> dict[str, str]:
        return {step: step_model_name(self.name, step) for step in STEPS}

    @property
    def instance_counts(self) -> tuple[int, int, int]:
        """Instances of preprocess, detector and NMS: ``--instances``, or the default for the detector's device."""
        if self.instances is not None:
            return self.instances
        return (2, 1, 2) if self.target == "onnxruntime" and self.detector_device == "cpu" else (2, 2, 2)

    @property
    def detector_thread_setting(self) -> int:
        """``intra_op_threads`` for the embedded detector (generator.serving.runner.session_threads): -1, every
        core per instance, for the default CPU topology; else ``--detector-threads`` (0: cores / instances)."""
        default_topology = self.instances is None and self.detector_device == "cpu"
        return -1 if default_topology and self.detector_threads == 0 else self.detector_threads

    @property
    def detector_spin_setting(self) -> str | None:
        """``spin_wait`` for the embedded detector: "true" (always), "run" (only while a run lasts), "alone" (only
        while a run with no other instance running lasts) or None."""
        if self.detector_spinning:
            return "true"
        return None if self.detector_spin == "off" else self.detector_spin

    @property
    def preprocess_instances(self) -> int:
        return self.instance_counts[0]

    @property
    def detector_instances(self) -> int:
        return self.instance_counts[1]

    @property
    def nms_instances(self) -> int:
        return self.instance_counts[2]
