"""What the GPU-detector proof serves and compares: the repositories, the images, the CPU reference.

The repositories and the CPU reference are made here (``tools.gpu.detector_repos``), on ONNX Runtime 1.32's CPU
provider, the project's reference; the device run (``tools.gpu.detector_proof``) serves the repositories on the
GPU and compares with what this module computed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from generator.serving.batch import prepare_batch
from generator.serving.nms import postprocess
from generator.serving.runner import OnnxRunner

REFERENCE = "reference.json"
HEADS = "heads.npz"
HEAD_IMAGES = 4  # scenes whose whole served head is kept for the numeric comparison
# Capacity is what the sweep measures: queues deep enough that nothing is shed (overload is proven elsewhere).
NO_SHEDDING = {"max_queue_ms": 10_000.0, "service_ms": 10.0}
_PARAMETER = re.compile(r'parameters \{\s*key: "([^"]*)"\s*value \{ string_value: "([^"]*)" \}')


@dataclass(frozen=True)
class Case:
    """One repository of the proof: its source detector and build options (``BuildOptions`` keywords)."""

    source: str  # "demo" or "yolov8n"
    options: dict[str, Any] = field(default_factory=dict)
    sweep: bool = False  # end to end at concurrency 1..128


# The three steps these runs measured (tools.gpu.detector_load reads each step's statistics); one fused step is
# measured by tools/gpu/offline_run.sh (y11, y11_fused).
GPU_PRE = {"preprocess_device": "gpu", "fuse_preprocess": "off"}
CASES: dict[str, Case] = {
    # The committed CPU-detector runs used the default instances (1 2 1) and batches of 8.
    "demo_fp32_default": Case("demo", {}, sweep=True),
    "demo_fp32_cpupre": Case("demo", {"instances": (8, 2, 2)}, sweep=True),
    "demo_fp32_gpupre": Case("demo", {**GPU_PRE, "instances": (2, 2, 2)}, sweep=True),
    "demo_fp32_gpunms": Case("demo", {**GPU_PRE, "instances": (2, 2, 2), "nms_in_graph": True}),
    "demo_fp16": Case("demo", {**GPU_PRE, "instances": (1, 1, 1), "precision": "fp16"}),
    "demo_int8": Case("demo", {**GPU_PRE, "instances": (1, 1, 1), "precision": "int8"}),
    "demo_int8f32": Case("demo", {**GPU_PRE, "instances": (1, 1, 1), "precision": "int8", "int8_float": "fp32"}),
    "v8n_fp32": Case("yolov8n", {**GPU_PRE, "instances": (2, 2, 2)}, sweep=True),
    "v8n_fp16": Case("yolov8n", {**GPU_PRE, "instances": (1, 1, 1), "precision": "fp16"}),
    "v8n_int8": Case("yolov8n", {**GPU_PRE, "instances": (1, 1, 1), "precision": "int8"}),
}


def build_options(name: str, case: Case, calib_images: Path | None) -> Any:
    """The case's ``BuildOptions``: GPU detector, batches up to 32 unless the defaults are the point."""
    from generator.builder.spec.options import BuildOptions, GateOptions, PrecisionOptions

    options: dict[str, Any] = {**NO_SHEDDING, **case.options}
    int8_float = options.pop("int8_float", "auto")
    if not name.endswith("_default"):
        options["max_batch"] = 32
    calibration = PrecisionOptions(calib_images=calib_images if case.source == "yolov8n" else None,
                                   int8_float=int8_float, calib_count=64)
    # Random weights score nothing: the yolov8n graphs are compared on their raw heads, not by an mAP gate.
    gate = GateOptions(enabled=case.source == "demo")
    return BuildOptions(name=name, device="gpu", calibration=calibration, gate=gate, **options)


def images() -> dict[str, bytes]:
    """The demo scenes at four sizes and one image per accepted format, by name."""
    from tests.fixtures.image_corpus import zoo
    from tools.gpu.gpu_proof import demo_scenes

    return {**{f"scene-{i}": data for i, data in enumerate(demo_scenes())}, **zoo()}


@dataclass(frozen=True)
class Served:
    """How a repository's ensemble turns a head into detections (from its configs)."""

    onnx: Path
    image_size: tuple[int, int]
    layout: str
    conf: float
    iou: float
    max_det: int

    @classmethod
    def read(cls, repository: Path, name: str) -> Served:
        def parameters(step: str) -> dict[str, str]:
            return config_parameters((repository / f"{name}_{step}" / "config.pbtxt").read_text())

        pre, nms = parameters("preprocess"), parameters("nms")
        return cls(repository / f"{name}_detector" / "1" / "model.onnx",
                   (int(pre["input_height"]), int(pre["input_width"])), nms["layout"],
                   float(nms["conf_threshold"]), float(nms["iou_threshold"]), int(nms["max_detections"]))


def config_parameters(text: str) -> dict[str, str]:
    """The ``parameters`` of a rendered config.pbtxt (the device has no tritonclient to parse it with)."""
    return dict(_PARAMETER.findall(text))


def tensor_digest(images: np.ndarray, letterbox: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(images).tobytes() + letterbox.astype(np.float32).tobytes()).hexdigest()


def detections_of(served: Served, raw: np.ndarray, letterbox: np.ndarray) -> dict[str, Any]:
    out = postprocess(raw, served.layout, letterbox, served.conf, served.iou, served.max_det)
    n = int(out.num_detections[0, 0])
    return {"n": n, "boxes": out.boxes[0, :n].round(3).tolist(), "scores": out.scores[0, :n].round(6).tolist(),
            "classes": out.classes[0, :n].tolist()}


def cpu_reference(repository: Path, name: str, named: dict[str, bytes]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Detections of the CPU path (CPU preprocess, CPU provider) per image, and the first scenes' whole heads."""
    served = Served.read(repository, name)
    runner = OnnxRunner(str(served.onnx), intra_op_threads=0)
    rows: dict[str, Any] = {}
    heads: dict[str, np.ndarray] = {}
    for index, (image, data) in enumerate(named.items()):
        batch = prepare_batch([data], served.image_size)
        if batch.errors:
            rows[image] = {"error": batch.errors[0]}
            continue
        (raw,) = runner.run(batch.images)
        rows[image] = {**detections_of(served, raw, batch.letterbox),
                       "input_sha256": tensor_digest(batch.images, batch.letterbox)}
        if index < HEAD_IMAGES:
            heads[f"{name}/{image}"] = raw[0]
    return rows, heads


def save_reference(folder: Path, rows: dict[str, Any], heads: dict[str, np.ndarray]) -> None:
    (folder / REFERENCE).write_text(json.dumps(rows))
    arrays: dict[str, Any] = dict(heads)  # numpy 2.4's stub would read the keyword arguments as allow_pickle
    np.savez_compressed(folder / HEADS, **arrays)


def load_reference(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(folder / HEADS) as heads:
        return json.loads((folder / REFERENCE).read_text()), {key: heads[key] for key in heads.files}
