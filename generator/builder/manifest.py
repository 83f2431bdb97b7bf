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
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from generator import __version__
from generator.builder.tensorrt.availability import MachineFacts
from generator.builder.tensorrt.profiles import ShapeProfile
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
    """Where a TensorRT plan was built: what decides whether it loads elsewhere."""

    tensorrt_version: str
    cuda_version: str | None
    gpu_name: str
    compute_capability: str
    triton_image: str | None = None
    hardware_compatibility: str = "none"  # "ampere_plus": runs on any compute capability >= 8.0
    version_compatible: bool = False  # built with BuilderFlag.VERSION_COMPATIBLE
    plan_files: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "tensorrt_version": self.tensorrt_version,
            "cuda_version": self.cuda_version,
            "gpu_name": self.gpu_name,
            "compute_capability": self.compute_capability,
            "triton_image": self.triton_image,
            "hardware_compatibility": self.hardware_compatibility,
            "version_compatible": self.version_compatible,
            "plan_files": list(self.plan_files),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanFacts:
        return cls(
            tensorrt_version=str(data["tensorrt_version"]),
            cuda_version=data.get("cuda_version"),
            gpu_name=str(data["gpu_name"]),
            compute_capability=str(data["compute_capability"]),
            triton_image=data.get("triton_image"),
            hardware_compatibility=str(data.get("hardware_compatibility", "none")),
            version_compatible=bool(data.get("version_compatible", False)),
            plan_files=tuple(data.get("plan_files", ())),
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
    profiles: tuple[ShapeProfile, ...] = ()
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
                "profiles": [p.to_json() for p in self.profiles],
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
                profiles=tuple(ShapeProfile.from_json(p) for p in data.get("profiles") or ()),
                plan=PlanFacts.from_json(data["tensorrt"]) if data.get("tensorrt") else None,
                source_onnx_path=source.get("path"),
                extra={k: v for k, v in data.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(
                f"manifest.json is malformed ({type(exc).__name__}: {exc}); rebuild the repository"
            ) from exc


@dataclass(frozen=True)
class Mismatch:
    """One reason the repository differs from its build or will not load here."""

    kind: str  # file_changed | file_missing | file_added | tensorrt_missing | tensorrt_version | gpu_missing | compute_capability | cuda_version
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


def write_manifest(repository: Path, manifest: Manifest) -> Manifest:
    """Hash the repository as it is on disk, then write ``manifest.json``; returns what was written."""
    if not repository.is_dir():
        raise ManifestError(f"{repository} is not a directory")
    final = replace(manifest, files=hash_repository(repository))
    tmp = repository / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(final.to_json(), indent=2) + "\n")
    tmp.replace(repository / MANIFEST_NAME)
    return final


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


def compare(manifest: Manifest, machine: MachineFacts | None, repository: Path) -> list[Mismatch]:
    """Everything that differs. ``machine=None`` checks files only (no TensorRT/GPU comparison)."""
    rebuild = rebuild_command(manifest, repository)
    mismatches = _compare_files(manifest, repository, rebuild)
    if machine is not None and manifest.plan is not None:
        mismatches += _compare_plan(manifest.plan, machine, rebuild)
    return mismatches


def _compare_files(manifest: Manifest, repository: Path, rebuild: str) -> list[Mismatch]:
    found = set(_repository_files(repository))
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


def _compare_plan(plan: PlanFacts, machine: MachineFacts, rebuild: str) -> list[Mismatch]:
    built_on = f"TensorRT {_short(plan.tensorrt_version)} on {plan.gpu_name} (compute capability {plan.compute_capability})"
    out: list[Mismatch] = []
    if machine.tensorrt_version is None:
        out.append(
            Mismatch(
                "tensorrt_missing",
                "tensorrt",
                f"the plan was built with {built_on} but this machine has no TensorRT, so it cannot tell whether the "
                f"plan loads; run check on the serving GPU host (in {plan.triton_image or 'the target Triton image'}) "
                "or pass --files-only to check file integrity only",
            )
        )
    elif not _tensorrt_compatible(plan, machine.tensorrt_version):
        out.append(
            Mismatch(
                "tensorrt_version",
                "tensorrt",
                f"plan built with TensorRT {_short(plan.tensorrt_version)} but this machine has "
                f"{_short(machine.tensorrt_version)}; rebuild the plan on this machine ({rebuild})",
            )
        )
    if not machine.gpus:
        out.append(
            Mismatch(
                "gpu_missing",
                "gpu",
                f"the plan was built for {plan.gpu_name} (compute capability {plan.compute_capability}) but this "
                "machine has no visible NVIDIA GPU; serve it on a GPU host with that architecture",
            )
        )
    for index, gpu in enumerate(machine.gpus):
        if not _capability_compatible(plan, gpu.compute_capability):
            allowed = (
                ">= 8.0 (AMPERE_PLUS)"
                if plan.hardware_compatibility == "ampere_plus"
                else plan.compute_capability
            )
            out.append(
                Mismatch(
                    "compute_capability",
                    f"gpu{index}",
                    f"plan built for compute capability {allowed} ({plan.gpu_name}) but GPU {index} here is "
                    f"{gpu.name} with {gpu.compute_capability}; rebuild the plan on this machine ({rebuild})",
                )
            )
    if (
        plan.cuda_version
        and machine.cuda_version
        and _major(plan.cuda_version) > _major(machine.cuda_version)
    ):
        out.append(
            Mismatch(
                "cuda_version",
                "cuda",
                f"plan built with CUDA {plan.cuda_version} but this machine's driver supports CUDA "
                f"{machine.cuda_version}; update the NVIDIA driver or rebuild the plan here ({rebuild})",
            )
        )
    return out


def _tensorrt_compatible(plan: PlanFacts, here: str) -> bool:
    """Plans need the same TensorRT (major.minor.patch); version-compatible plans run on newer 10.x+."""
    built, current = _version_tuple(plan.tensorrt_version), _version_tuple(here)
    if plan.version_compatible:
        return current[:1] == built[:1] and current[:3] >= built[:3]
    return current[:3] == built[:3]


def _capability_compatible(plan: PlanFacts, here: str) -> bool:
    if plan.hardware_compatibility == "ampere_plus":
        return _version_tuple(here) >= (8, 0)
    return _version_tuple(here)[:2] == _version_tuple(plan.compute_capability)[:2]


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _short(version: str) -> str:
    return ".".join(str(p) for p in _version_tuple(version)[:2]) or version


def _major(version: str) -> int:
    parts = _version_tuple(version)
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
