"""``manifest.json``: what a repository was built from and for, in typed sections, and its one reader.

A TensorRT plan loads only on the TensorRT version and GPU architecture it was built with
("Version tag does not match", server #7613), and any edited file silently changes what is
served. The manifest records both, so ``python -m generator check`` can refuse a repository
before Triton does (:mod:`generator.repository.check`), and every other reader (validate, deploy,
the load tests) gets the same typed record instead of reading JSON by hand.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import __version__
from generator.errors import GeneratorError
from generator.repository.admission_record import Admission

MANIFEST_NAME = "manifest.json"
TOOL = "triton-detection-ensemble"


class ManifestError(GeneratorError):
    """manifest.json is missing or unreadable."""


@dataclass(frozen=True)
class Thresholds:
    conf: float
    iou: float
    max_detections: int


@dataclass(frozen=True)
class PlanFacts:
    """The TensorRT plan: what was asked of it (always known) and where it was built (once it is).

    A ``--defer-plan`` build records the request with ``status`` "pending"; ``python -m generator plan``
    fills in the built facts, which decide where the plan loads.
    """

    plan_file: str  # repository-relative, e.g. "yolo_detector/1/model.plan"
    spec_file: str | None = None  # its build_spec.json
    status: str = "built"  # "pending" | "built"
    triton_image: str | None = None
    hardware_compatibility: str = "none"  # "ampere_plus": runs on any compute capability >= 8.0
    version_compatible: bool = False  # built with BuilderFlag.VERSION_COMPATIBLE
    profile: Mapping[str, Any] | None = None  # the optimization profile, as in the build spec
    tensorrt_version: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    build_seconds: float | None = None

    @property
    def pending(self) -> bool:
        return self.status == "pending" or self.tensorrt_version is None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "pending" if self.pending else "built",
            "plan_file": self.plan_file,
            "spec_file": self.spec_file,
            "triton_image": self.triton_image,
            "hardware_compatibility": self.hardware_compatibility,
            "version_compatible": self.version_compatible,
            "profile": dict(self.profile) if self.profile is not None else None,
            "tensorrt_version": self.tensorrt_version,
            "cuda_version": self.cuda_version,
            "driver_version": self.driver_version,
            "gpu_name": self.gpu_name,
            "compute_capability": self.compute_capability,
            "build_seconds": self.build_seconds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanFacts:
        """Also reads the first layout (built facts only, ``plan_files`` list)."""
        plan_file = data.get("plan_file") or (list(data.get("plan_files") or []) or [""])[0]
        version = data.get("tensorrt_version")
        return cls(
            plan_file=str(plan_file),
            spec_file=data.get("spec_file"),
            status=str(data.get("status") or ("built" if version else "pending")),
            triton_image=data.get("triton_image"),
            hardware_compatibility=str(data.get("hardware_compatibility") or "none"),
            version_compatible=bool(data.get("version_compatible", False)),
            profile=data.get("profile"),
            tensorrt_version=None if version is None else str(version),
            cuda_version=data.get("cuda_version"),
            driver_version=data.get("driver_version"),
            gpu_name=data.get("gpu_name"),
            compute_capability=None if data.get("compute_capability") is None else str(data["compute_capability"]),
            build_seconds=data.get("build_seconds"),
        )


@dataclass(frozen=True)
class DetectorRecord:
    """The detector as inspected and as served. None: not recorded (a manifest from an older build)."""

    layout: str | None = None  # the exported head (v8, v5, end2end)
    served_layout: str | None = None  # what the NMS step decodes (v8_reduced after the class reduction, graph_nms)
    reduce_head: bool = False
    image_size: tuple[int, int] | None = None  # height, width
    static_batch: int | None = None
    class_names: tuple[str, ...] = ()
    normalise_in: str | None = None
    reduced_decode: bool | None = None
    nms_in_graph: bool = False
    nms_placement: str | None = None  # why NMS runs where it does (placement.py's reason)
    device: str = "cpu"
    requirements: tuple[str, ...] = ()  # what a Python-backend detector on the GPU imports

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "served_layout": self.served_layout,
            "reduce_head": self.reduce_head,
            "image_size": None if self.image_size is None else list(self.image_size),
            "static_batch": self.static_batch,
            "class_names": list(self.class_names),
            "normalise_in": self.normalise_in,
            "reduced_decode": self.reduced_decode,
            "nms_in_graph": self.nms_in_graph,
            "nms_placement": self.nms_placement,
            "device": self.device,
            "requirements": list(self.requirements),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DetectorRecord:
        size = data.get("image_size")
        return cls(layout=data.get("layout"), served_layout=data.get("served_layout"),
                   reduce_head=bool(data.get("reduce_head", False)),
                   image_size=None if size is None else (int(size[0]), int(size[1])),
                   static_batch=data.get("static_batch"), class_names=tuple(map(str, data.get("class_names", ()))),
                   normalise_in=data.get("normalise_in"), reduced_decode=data.get("reduced_decode"),
                   nms_in_graph=bool(data.get("nms_in_graph", False)),
                   nms_placement=data.get("nms_placement"), device=str(data.get("device") or "cpu"),
                   requirements=tuple(map(str, data.get("requirements") or ())))


@dataclass(frozen=True)
class PreprocessRecord:
    """Where the preprocess step runs and, on the GPU, the packages it imports there."""

    device: str = "cpu"
    requirements: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "requirements": list(self.requirements)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreprocessRecord:
        return cls(str(data.get("device") or "cpu"), tuple(map(str, data.get("requirements") or ())))


@dataclass(frozen=True)
class Manifest:
    """The recorded build. ``files`` maps repository-relative POSIX paths to sha256.

    ``options`` is the record of every declared build option (generator/builder/spec: ``to_record``), ``rebuild``
    the command that builds the repository again, ``precision_facts`` what the precision stage reports (nodes kept
    in FP32, the calibration set). ``version`` and ``serves_as`` mark one version of a versioned repository.
    """

    name: str
    target: str
    precision: str
    onnx_sha256: str
    thresholds: Thresholds
    files: Mapping[str, str] = field(default_factory=dict)
    tool_version: str = __version__
    validation_skipped: bool = False
    validation: str | None = None
    calibration_method: str | None = None
    calibration_digest: str | None = None
    max_batch: int | None = None
    plan: PlanFacts | None = None
    source_onnx_path: str | None = None
    detector: DetectorRecord | None = None
    preprocess: PreprocessRecord | None = None
    precision_facts: Mapping[str, str] = field(default_factory=dict)
    admission: Admission | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    rebuild: tuple[str, ...] = ()
    version: int | None = None
    serves_as: str | None = None  # the alias a version serves under (its ensemble is NAME_vN)

    def to_json(self) -> dict[str, Any]:
        """The JSON object, keys in the order every build since the first has written them."""
        data: dict[str, Any] = {}
        if self.detector is not None:
            data["detector"] = self.detector.to_json()
        if self.preprocess is not None:
            data["preprocess"] = self.preprocess.to_json()
        data["precision_facts"] = dict(self.precision_facts)
        if self.admission is not None:
            data["admission"] = self.admission.to_json()
        data.update(options=dict(self.options), rebuild=list(self.rebuild), tool=TOOL, tool_version=self.tool_version,
                    name=self.name, target=self.target, precision=self.precision, onnx_sha256=self.onnx_sha256,
                    source_onnx={"path": self.source_onnx_path, "sha256": self.onnx_sha256},
                    thresholds={"conf": self.thresholds.conf, "iou": self.thresholds.iou,
                                "max_detections": self.thresholds.max_detections},
                    max_batch=self.max_batch,
                    calibration={"method": self.calibration_method, "digest": self.calibration_digest},
                    validation_skipped=self.validation_skipped, validation=self.validation,
                    tensorrt=self.plan.to_json() if self.plan is not None else None,
                    files=dict(sorted(self.files.items())))
        if self.version is not None:
            data.update(version=self.version, serves_as=self.serves_as)
        return data

    def to_bytes(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """Parse a manifest (also the first layout ``generator build`` wrote: no top-level onnx_sha256)."""
        try:
            return cls(**_core(data), **_sections(data))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ManifestError(
                f"manifest.json is malformed ({type(exc).__name__}: {exc}); rebuild the repository"
            ) from exc


def _core(data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every manifest has had: what was built, from what, with which files."""
    source = data.get("source_onnx") or {}
    facts = data.get("precision_facts") or {}
    calibration = data.get("calibration") or {}
    thresholds = data["thresholds"]
    validation = data.get("validation")
    return {
        "name": str(data["name"]), "target": str(data["target"]), "precision": str(data["precision"]),
        "onnx_sha256": str(data.get("onnx_sha256") or source["sha256"]),
        "thresholds": Thresholds(float(thresholds["conf"]), float(thresholds["iou"]),
                                 int(thresholds["max_detections"])),
        "files": {str(k): str(v) for k, v in data["files"].items()},
        "tool_version": str(data.get("tool_version", "unknown")),
        "validation_skipped": bool(data.get("validation_skipped",
                                            isinstance(validation, str) and "skipped" in validation)),
        "validation": validation,
        "calibration_method": calibration.get("method") or facts.get("calibration_method"),
        "calibration_digest": calibration.get("digest") or facts.get("calibration_digest"),
        "max_batch": data.get("max_batch"),
        "plan": PlanFacts.from_json(data["tensorrt"]) if data.get("tensorrt") else None,
        "source_onnx_path": source.get("path"),
    }


def _sections(data: Mapping[str, Any]) -> dict[str, Any]:
    """The typed sections; a manifest from an older build may lack any of them."""
    detector, preprocess, admission = data.get("detector"), data.get("preprocess"), data.get("admission")
    version = data.get("version")
    return {
        "detector": DetectorRecord.from_json(detector) if detector is not None else None,
        "preprocess": PreprocessRecord.from_json(preprocess) if preprocess is not None else None,
        "precision_facts": {str(k): str(v) for k, v in (data.get("precision_facts") or {}).items()},
        "admission": Admission.from_json(admission) if admission is not None else None,
        "options": dict(data.get("options") or {}),
        "rebuild": tuple(map(str, data.get("rebuild") or ())),
        "version": None if version is None else int(version),
        "serves_as": data.get("serves_as"),
    }


def read_manifest_file(path: Path, missing: str) -> Manifest:
    """The manifest at ``path``; ``missing`` says what to do when there is none."""
    if not path.is_file():
        raise ManifestError(missing)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path} is not a JSON object")
    return Manifest.from_json(data)


def read_manifest(repository: Path) -> Manifest:
    """The manifest of an unversioned repository (a versioned one: :func:`generator.repository.versions.served_manifest`)."""
    return read_manifest_file(repository / MANIFEST_NAME,
                              f"{repository} has no {MANIFEST_NAME}; build it with python -m generator build")


def rebuild_command(manifest: Manifest, repository: Path) -> str:
    """The build command that recreates ``repository``: recorded by the build with every option."""
    if manifest.rebuild:
        words = list(manifest.rebuild)
        if "--output" in words[:-1]:
            words[words.index("--output") + 1] = str(repository)
        return shlex.join(words)
    # A manifest from before the options were recorded: the options it kept.
    parts = ["python", "-m", "generator", "build"]
    if manifest.source_onnx_path:
        parts += ["--onnx", manifest.source_onnx_path]
    parts += ["--target", manifest.target, "--precision", manifest.precision, "--name", manifest.name]
    if manifest.max_batch is not None:
        parts += ["--max-batch", str(manifest.max_batch)]
    return shlex.join([*parts, "--output", str(repository)])


def plan_command(repository: Path, force: bool = False) -> str:
    """The command that builds (or rebuilds) a repository's plan from its build spec on this machine."""
    return shlex.join(["python", "-m", "generator", "plan", str(repository), *(["--force"] if force else [])])


def server_flags(manifest: Manifest) -> list[str]:
    """tritonserver flags this repository needs beyond the usual ones (deploy and ``generator serve`` add them).

    A version-compatible plan embeds the lean runtime's host code, which the TensorRT backend deserialises
    only when told to (tensorrt_backend tensorrt.cc TRITONBACKEND_Initialize -> loader.cc LoadPlan:
    setEngineHostCodeAllowed); without the flag the model fails to load.
    """
    if manifest.plan is not None and manifest.plan.version_compatible:
        return ["--backend-config=tensorrt,version-compatible=true"]
    return []
