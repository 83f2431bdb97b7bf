"""Validated build options: impossible combinations fail here, before anything is written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from generator.errors import GeneratorError

TARGETS = ("embedded", "onnxruntime", "tensorrt")
PRECISIONS = ("fp32", "fp16", "int8")
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
    max_bytes: int = 32 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_side: int = 16384

    def __post_init__(self) -> None:
        for key in ("max_bytes", "max_pixels", "max_side"):
            if getattr(self, key) <= 0:
                raise SpecError(f"image limit {key} must be positive")


@dataclass(frozen=True)
class BuildOptions:
    name: str = "yolo"
    target: str = "embedded"
    precision: str = "fp32"
    max_batch: int = 8
    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 100
    image_size: tuple[int, int] | None = None
    limits: ImageLimitOptions = field(default_factory=ImageLimitOptions)
    reduced_decode: bool = True
    # "graph": uint8 images travel between steps and the detector graph normalises (fast);
    # "preprocess": the Python step sends float NCHW tensors (the straightforward design, for comparison).
    normalise_in: str = "graph"
    # v8 heads: the served graph ends with the per-anchor class max/arg-max, so the NMS step receives
    # [N, 6, A] instead of [N, 4 + nc, A] (generator.build.graph.suffix).
    reduce_head: bool = True
    # No waiting by default: on a busy CPU requests queue up behind the running batch anyway, and a
    # delay only adds latency at low load (measured: ~2 ms per step at concurrency 1).
    queue_delay_us: int = 0
    queue_timeout_us: int = 5_000_000
    max_queue_size: int = 64
    preprocess_instances: int = 1
    # Two detector instances: under load both run, which on CPU beats one session's intra-op scaling
    # (yolov8n, 2 cores: two sessions 13.8-14.0 img/s, one 10.6-11.9) and on a GPU overlaps one
    # instance's copies with the other's compute.
    detector_instances: int = 2
    nms_instances: int = 1
    # Embedded detector: ONNX Runtime intra-op threads per instance; 0 sizes them from the host
    # (cores / detector instances), so instances running at once do not oversubscribe the cores.
    detector_threads: int = 0

    def __post_init__(self) -> None:
        validate_model_name(self.name)
        if self.target not in TARGETS:
            raise SpecError(f"unknown --target {self.target!r}; choose one of {', '.join(TARGETS)}")
        if self.precision not in PRECISIONS:
            raise SpecError(f"unknown --precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if not 1 <= self.max_batch <= 1024:
            raise SpecError(f"--max-batch must be between 1 and 1024, got {self.max_batch}")
        if not 0.0 <= self.conf_threshold < 1.0:
            raise SpecError(f"--conf-threshold must be in [0, 1), got {self.conf_threshold}")
        if not 0.0 < self.iou_threshold <= 1.0:
            raise SpecError(f"--iou-threshold must be in (0, 1], got {self.iou_threshold}")
        if not 1 <= self.max_detections <= 10000:
            raise SpecError(f"--max-detections must be between 1 and 10000, got {self.max_detections}")
        if self.image_size is not None and (min(self.image_size) < 32 or max(self.image_size) > 8192):
            raise SpecError(f"--imgsz must be between 32 and 8192, got {self.image_size}")
        for key in ("preprocess_instances", "detector_instances", "nms_instances"):
            if not 1 <= getattr(self, key) <= 64:
                raise SpecError(f"{key.replace('_', '-')} must be between 1 and 64")
        if not 0 <= self.detector_threads <= 1024:
            raise SpecError(f"--detector-threads must be between 0 (cores / instances) and 1024, got {self.detector_threads}")
        if self.normalise_in not in ("graph", "preprocess"):
            raise SpecError(f"--normalise-in must be 'graph' or 'preprocess', got {self.normalise_in!r}")
        if self.queue_delay_us < 0 or self.queue_timeout_us < 0 or self.max_queue_size < 0:
            raise SpecError("queue settings must not be negative")

    @property
    def model_names(self) -> dict[str, str]:
        return {step: f"{self.name}_{step}" for step in ("preprocess", "detector", "nms")}
