"""``manifest.json``: what a repository was built from and for, and the comparison ``check`` runs.

A TensorRT plan loads only on the TensorRT version and GPU architecture it was built with
("Version tag does not match", server #7613), and any edited file silently changes what is
served. The manifest records both, so ``python -m generator check`` can refuse a repository
before Triton does, with one actionable line per problem.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from generator import __version__
from generator.builder.stages.tensorrt.availability import MachineFacts
from generator.builder.stages.tensorrt.compatibility import parse_version, plan_loads, short
from generator.errors import GeneratorError

MANIFEST_NAME = "manifest.json"
# Written by the Python backend / Python itself while serving; not part of what was built.
_RUNTIME_ARTIFACTS = ("__pycache__",)
_RUNTIME_SUFFIXES = (".pyc",)
# Reports about the build (rewritten by `generator validate`) and checkout files, not what is served.
_UNHASHED_TOP_LEVEL = ("validation.json", "validation.md", ".gitignore", ".gitkeep")


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
class Manifest:
    """The recorded build. ``files`` maps repository-relative POSIX paths to sha256."""

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
    # Other build facts (detector layout, class names, precision details) kept verbatim.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.extra)
        data.update(
            {
                "tool": "triton-detection-ensemble",
                "tool_version": self.tool_version,
                "name": self.name,
                "target": self.target,
                "precision": self.precision,
                "onnx_sha256": self.onnx_sha256,
                "source_onnx": {"path": self.source_onnx_path, "sha256": self.onnx_sha256},
                "thresholds": {
                    "conf": self.thresholds.conf,
                    "iou": self.thresholds.iou,
                    "max_detections": self.thresholds.max_detections,
                },
                "max_batch": self.max_batch,
                "calibration": {"method": self.calibration_method, "digest": self.calibration_digest},
                "validation_skipped": self.validation_skipped,
                "validation": self.validation,
                "tensorrt": self.plan.to_json() if self.plan is not None else None,
                "files": dict(sorted(self.files.items())),
            }
        )
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """Parse a manifest (also the first layout ``generator build`` wrote: no top-level onnx_sha256)."""
        try:
            source = data.get("source_onnx") or {}
            facts = data.get("precision_facts") or {}
            calibration = data.get("calibration") or {}
            thresholds = data["thresholds"]
            validation = data.get("validation")
            known = {
                "tool",
                "tool_version",
                "name",
                "target",
                "precision",
                "onnx_sha256",
                "source_onnx",
                "thresholds",
                "max_batch",
                "calibration",
                "profiles",
                "validation_skipped",
                "validation",
                "tensorrt",
                "files",
            }
            return cls(
                name=str(data["name"]),
                target=str(data["target"]),
                precision=str(data["precision"]),
                onnx_sha256=str(data.get("onnx_sha256") or source["sha256"]),
                thresholds=Thresholds(
                    float(thresholds["conf"]), float(thresholds["iou"]), int(thresholds["max_detections"])
                ),
                files={str(k): str(v) for k, v in data["files"].items()},
                tool_version=str(data.get("tool_version", "unknown")),
                validation_skipped=bool(
                    data.get("validation_skipped", isinstance(validation, str) and "skipped" in validation)
                ),
                validation=validation,
                calibration_method=calibration.get("method") or facts.get("calibration_method"),
                calibration_digest=calibration.get("digest") or facts.get("calibration_digest"),
                max_batch=data.get("max_batch"),
                plan=PlanFacts.from_json(data["tensorrt"]) if data.get("tensorrt") else None,
                source_onnx_path=source.get("path"),
                extra={k: v for k, v in data.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(
                f"manifest.json is malformed ({type(exc).__name__}: {exc}); rebuild the repository"
            ) from exc


# Why a repository differs from its build or will not load here; a Literal, so the list cannot drift from the code.
MismatchKind = Literal["file_changed", "file_missing", "file_added", "plan_pending", "tensorrt_missing",
                       "tensorrt_version", "gpu_missing", "compute_capability", "cuda_version", "gpu_preprocess",
                       "gpu_detector"]


@dataclass(frozen=True)
class Mismatch:
    """One reason the repository differs from its build or will not load here."""

    kind: MismatchKind
    subject: str
    message: str


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_files(files: Mapping[str, bytes]) -> dict[str, str]:
    """Hashes of in-memory repository files (for builds that write the repository at once)."""
    return {
        path: sha256_bytes(content)
        for path, content in sorted(files.items())
        if path != MANIFEST_NAME and path not in _UNHASHED_TOP_LEVEL
    }


def hash_repository(repository: Path) -> dict[str, str]:
    """sha256 of every file under ``repository`` except manifest.json and runtime caches."""
    return {rel: sha256_file(repository / rel) for rel in _repository_files(repository)}


def read_manifest(repository: Path) -> Manifest:
    path = repository / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{repository} has no {MANIFEST_NAME}; build it with python -m generator build")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path} is not a JSON object")
    return Manifest.from_json(data)


def rebuild_command(manifest: Manifest, repository: Path) -> str:
    """The build command that recreates ``repository``: recorded by the build with every option."""
    words = manifest.extra.get("rebuild")
    if isinstance(words, list) and words and all(isinstance(w, str) for w in words):
        words = list(words)
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


def compare(manifest: Manifest, machine: MachineFacts | None, repository: Path,
            within: Iterable[str] | None = None) -> list[Mismatch]:
    """Everything that differs. ``machine=None`` checks files only (no TensorRT/GPU comparison).

    ``within`` (one version of a versioned repository) limits the search for added files to those top-level
    model folders; their own records (manifest, gate report, rollout decisions) are not build files.
    """
    rebuild = rebuild_command(manifest, repository)
    mismatches = _compare_files(manifest, repository, rebuild, None if within is None else set(within))
    plan = manifest.plan
    if machine is None or plan is None:
        return mismatches
    if plan.pending:
        where = plan.triton_image or "the Triton image that will serve it"
        mismatches.append(Mismatch(
            "plan_pending", plan.plan_file,
            f"the TensorRT plan has not been built yet (--defer-plan); on the GPU host that will serve it, in the "
            f"NGC TensorRT image of the same release as {where}, run: {plan_command(repository)}"))
        return mismatches
    return mismatches + _compare_plan(plan, machine, plan_command(repository, force=True))


def _compare_files(manifest: Manifest, repository: Path, rebuild: str,
                   within: set[str] | None = None) -> list[Mismatch]:
    found = set(_repository_files(repository))
    if within is not None:
        found = {rel for rel in found if rel.split("/")[0] in within and not _version_record(rel)}
    out: list[Mismatch] = []
    for rel, recorded in sorted(manifest.files.items()):
        if rel not in found:
            out.append(
                Mismatch(
                    "file_missing", rel, f"{_role(rel)} {rel} is missing since build; rebuild with {rebuild}"
                )
            )
            continue
        current = sha256_file(repository / rel)
        if current != recorded:
            out.append(
                Mismatch(
                    "file_changed",
                    rel,
                    f"{_role(rel)} {rel} changed since build (sha256 {recorded[:12]}… recorded, {current[:12]}… now); "
                    f"restore it or rebuild with {rebuild}",
                )
            )
    for rel in sorted(found - set(manifest.files)):
        out.append(
            Mismatch(
                "file_added",
                rel,
                f"{rel} was added after the build and Triton may load it; remove it or rebuild with {rebuild}",
            )
        )
    return out


def _compare_plan(plan: PlanFacts, machine: MachineFacts, replan: str) -> list[Mismatch]:
    built = plan.tensorrt_version or "?"
    built_on = f"TensorRT {short(built)} on {plan.gpu_name} (compute capability {plan.compute_capability})"
    out: list[Mismatch] = []
    if machine.tensorrt_version is None:
        image = plan.triton_image or "the target Triton image"
        out.append(Mismatch(
            "tensorrt_missing", "tensorrt",
            f"the plan was built with {built_on} but this machine has no TensorRT library (libnvinfer), so it "
            f"cannot tell whether the plan loads; run check on the serving GPU host (in {image}) or pass "
            "--files-only to check file integrity only"))
    else:
        verdict = plan_loads(built, machine.tensorrt_version, plan.version_compatible)
        if not verdict.loads:
            source = f" ({machine.tensorrt_source})" if machine.tensorrt_source else ""
            out.append(Mismatch(
                "tensorrt_version", "tensorrt",
                f"plan built with TensorRT {short(built)} but this machine has {short(machine.tensorrt_version)}"
                f"{source}: {verdict.reason}; rebuild the plan with this TensorRT on this GPU: {replan} (in the "
                "NGC TensorRT image of this Triton image's release)"))
    out += _compare_gpus(plan, machine, replan)
    if plan.cuda_version and machine.cuda_version and _major(plan.cuda_version) > _major(machine.cuda_version):
        out.append(Mismatch(
            "cuda_version", "cuda",
            f"plan built with CUDA {plan.cuda_version} but this machine's driver supports CUDA "
            f"{machine.cuda_version}; update the NVIDIA driver or rebuild the plan here ({replan})"))
    return out


def _compare_gpus(plan: PlanFacts, machine: MachineFacts, replan: str) -> list[Mismatch]:
    if not machine.gpus:
        return [Mismatch(
            "gpu_missing", "gpu",
            f"the plan was built for {plan.gpu_name} (compute capability {plan.compute_capability}) but this "
            "machine has no visible NVIDIA GPU; serve it on a GPU host with that architecture")]
    out = []
    for index, gpu in enumerate(machine.gpus):
        if not _capability_compatible(plan, gpu.compute_capability):
            allowed = ">= 8.0 (AMPERE_PLUS)" if plan.hardware_compatibility == "ampere_plus" else plan.compute_capability
            out.append(Mismatch(
                "compute_capability", f"gpu{index}",
                f"plan built for compute capability {allowed} ({plan.gpu_name}) but GPU {index} here is "
                f"{gpu.name} with {gpu.compute_capability}; rebuild the plan on this machine ({replan})"))
    return out


def _capability_compatible(plan: PlanFacts, here: str) -> bool:
    if plan.hardware_compatibility == "ampere_plus":
        return parse_version(here) >= (8, 0)
    return parse_version(here)[:2] == parse_version(plan.compute_capability or "")[:2]


def _major(version: str) -> int:
    parts = parse_version(version)
    return parts[0] if parts else 0


def _role(rel: str) -> str:
    name = PurePosixPath(rel).name
    if name.startswith("model.") and name.split(".")[-1] in {"onnx", "plan", "engine"}:
        return "model file"
    if name == "config.pbtxt":
        return "config"
    if name.endswith(".py"):
        return "code file"
    return "file"


def _version_record(rel: str) -> bool:
    """A record kept beside a version's ensemble config (NAME_vN/manifest.json, validation.*, rollout-*.json)."""
    parts = rel.split("/")
    return len(parts) == 2 and (parts[1] in (MANIFEST_NAME, *_UNHASHED_TOP_LEVEL) or
                                (parts[1].startswith("rollout-") and parts[1].endswith(".json")))


def _repository_files(repository: Path) -> Iterable[str]:
    for path in sorted(repository.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(repository)
        if rel.as_posix() in (MANIFEST_NAME, *_UNHASHED_TOP_LEVEL) or rel.name == f".{MANIFEST_NAME}.tmp":
            continue
        if any(part in _RUNTIME_ARTIFACTS for part in rel.parts) or rel.suffix in _RUNTIME_SUFFIXES:
            continue
        yield rel.as_posix()
