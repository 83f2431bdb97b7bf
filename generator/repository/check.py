"""Does a repository still match its build, and will it load here? One check for every caller.

``python -m generator check``, deploy (before it switches to or serves a repository) and the load tests (what
their numbers describe) call :func:`check_repository`. Every file is compared with the hashes its manifest
recorded; a TensorRT plan with this host's TensorRT, CUDA driver and GPUs (:mod:`generator.repository.host`;
``files_only`` skips that); a versioned repository version by version against each version's own manifest, plus
its alias and index against each other (by the hashes and the source version the index recorded, so nothing is
re-rendered) and the folders that belong to no version. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from generator.errors import GeneratorError
from generator.repository.compatibility import parse_version, plan_loads, short
from generator.repository.files import repository_files, role, sha256_file, version_record
from generator.repository.host import MachineFacts
from generator.repository.manifest import (
    Manifest,
    PlanFacts,
    plan_command,
    read_manifest,
    rebuild_command,
    server_flags,
)
from generator.repository.versions import (
    INDEX_NAME,
    PROGRESS_NAME,
    ROUTE_NAME,
    RepositoryIndex,
    legacy_index,
    read_index,
    read_version_manifest,
    version_models,
)

# Why a repository differs from its build or will not load here; a Literal, so the list cannot drift from the code.
MismatchKind = Literal["file_changed", "file_missing", "file_added", "plan_pending", "tensorrt_missing",
                       "tensorrt_version", "gpu_missing", "compute_capability", "cuda_version", "gpu_preprocess",
                       "gpu_detector"]
_STEP_PIN = re.compile(r"^\s*model_version\s*:\s*(-?\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Mismatch:
    """One reason the repository differs from its build or will not load here."""

    kind: MismatchKind
    subject: str
    message: str


# What a build's Python steps need on this host beyond its files (the GPU steps' packages and device): the caller
# that can import them passes it (generator.serving.gpu.environment, through generator/server/gpu_steps.py).
StepCheck = Callable[[Manifest], list[Mismatch]]


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
    found = set(repository_files(repository))
    if within is not None:
        found = {rel for rel in found if rel.split("/")[0] in within and not version_record(rel)}
    out: list[Mismatch] = []
    for rel, recorded in sorted(manifest.files.items()):
        if rel not in found:
            out.append(Mismatch("file_missing", rel, f"{role(rel)} {rel} is missing since build; rebuild with {rebuild}"))
            continue
        current = sha256_file(repository / rel)
        if current != recorded:
            out.append(Mismatch(
                "file_changed", rel,
                f"{role(rel)} {rel} changed since build (sha256 {recorded[:12]}… recorded, {current[:12]}… now); "
                f"restore it or rebuild with {rebuild}"))
    for rel in sorted(found - set(manifest.files)):
        out.append(Mismatch(
            "file_added", rel,
            f"{rel} was added after the build and Triton may load it; remove it or rebuild with {rebuild}"))
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


def check_version(repository: Path, index: RepositoryIndex, manifest: Manifest, version: int,
                  machine: MachineFacts | None) -> list[Mismatch]:
    """One version against its own manifest (and ``machine``); every message names the version."""
    mismatches = compare(manifest, machine, repository, within=version_models(index.name, version))
    prefix = f"version {version}: "
    return [Mismatch(m.kind, m.subject, prefix + m.message) for m in mismatches]


def check_alias(repository: Path, index: RepositoryIndex) -> list[Mismatch]:
    """The alias files are those the index recorded (sha256), made from the stable version's ensemble config.

    An index written before it recorded the alias's source version says it through the steps' version pins.
    """
    out: list[Mismatch] = []
    for rel, recorded in sorted(index.alias_files.items()):
        path = repository / rel
        if not path.is_file():
            out.append(Mismatch("file_missing", rel, f"the alias file {rel} is missing; run "
                                f"python -m generator rollback or promote again to rewrite it"))
        elif sha256_file(path) != recorded:
            out.append(Mismatch("file_changed", rel, f"the alias file {rel} changed since the index was written"))
    alias_config = repository / f"{index.name}/config.pbtxt"
    made_from = index.alias_version if index.alias_version is not None else _pinned_version(alias_config)
    if alias_config.is_file() and made_from != index.stable:
        source = f" (it was made from version {made_from})" if made_from is not None else ""
        out.append(Mismatch("file_changed", f"{index.name}/config.pbtxt",
                            f"the alias '{index.name}' does not serve the stable version {index.stable}{source}"))
    return out


def _pinned_version(config: Path) -> int | None:
    """The one version every step of an alias ensemble config is pinned to, else None."""
    pins = set(_STEP_PIN.findall(config.read_text(errors="replace"))) if config.is_file() else set()
    return int(pins.pop()) if len(pins) == 1 else None


def stray_entries(repository: Path, index: RepositoryIndex) -> list[Mismatch]:
    """Top-level entries that belong to no version, the alias or the index: Triton may load them."""
    known = {INDEX_NAME, ROUTE_NAME, PROGRESS_NAME, index.name,
             *(m for v in index.versions for m in version_models(index.name, v))}
    if legacy_index(repository):
        known.add("manifest.json")  # the index as it was named before versions.json
    return [Mismatch("file_added", entry.name, f"{entry.name} belongs to no version of '{index.name}' "
                     "(a pruned or foreign model?); remove it or rebuild")
            for entry in sorted(repository.iterdir()) if entry.name not in known and not entry.name.startswith(".")]


@dataclass(frozen=True)
class CheckedBuild:
    """One build that was checked: the repository's, or one version's (with its state in the index)."""

    manifest: Manifest
    version: int | None = None
    state: str | None = None


@dataclass(frozen=True)
class RepositoryCheck:
    """The verdict: every build checked, every mismatch, and the tritonserver flags the repository needs."""

    repository: Path
    builds: tuple[CheckedBuild, ...]
    mismatches: tuple[Mismatch, ...]
    server_flags: tuple[str, ...]
    index: RepositoryIndex | None = None
    machine: MachineFacts | None = None  # the host facts a plan was compared with (None: not compared)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def progress(self) -> list[str]:
        """One line per version checked (none for an unversioned repository)."""
        return [f"{self.repository}: version {b.version} ({b.state}): {len(b.manifest.files)} files checked "
                f"(target {b.manifest.target}, precision {b.manifest.precision})"
                for b in self.builds if b.version is not None]

    def summary(self) -> str:
        """The last line: how many mismatches, or what matched and how far it was checked."""
        if self.mismatches:
            return f"{self.repository}: {len(self.mismatches)} mismatch(es)"
        if self.index is not None:
            return (f"{self.repository}: versions {', '.join(map(str, self.index.served))} match their manifests; "
                    f"the alias '{self.index.name}' serves version {self.index.stable}")
        manifest = self.builds[0].manifest
        plan = manifest.plan
        if plan is not None and plan.pending:
            scope = "files checked; the TensorRT plan is still to be built: " + plan_command(self.repository)
        elif plan is None or self.machine is None:
            scope = "files checked"
        else:
            source = f" ({self.machine.tensorrt_source})" if self.machine.tensorrt_source else ""
            scope = f"files, TensorRT{source} and GPU checked"
        return (f"{self.repository}: {len(manifest.files)} files match the manifest ({scope}; "
                f"target {manifest.target}, precision {manifest.precision})")


def check_repository(repository: Path, *, files_only: bool = False, machine: MachineFacts | None = None,
                     steps: StepCheck | None = None) -> RepositoryCheck:
    """Check ``repository`` (unversioned, or every version of a versioned one) against its build and this host.

    ``machine`` replaces this host's facts (they are read only when a plan needs them); ``files_only`` compares
    files alone; ``steps`` checks what the build's Python steps need here (skipped with ``files_only``).
    """
    if not repository.is_dir():
        raise GeneratorError(f"{repository} is not a directory; pass the model repository built by generator build")
    host = _Host(machine, files_only)
    index = read_index(repository)
    if index is None:
        manifest = read_manifest(repository)
        mismatches = compare(manifest, host.facts_for(manifest), repository) + _steps(steps, manifest, files_only)
        return RepositoryCheck(repository, (CheckedBuild(manifest),), tuple(mismatches),
                               tuple(server_flags(manifest)), None, host.used)
    mismatches = check_alias(repository, index) + stray_entries(repository, index)
    builds, flags = [], []
    for version in index.served:
        manifest = read_version_manifest(repository, index.name, version)
        mismatches += check_version(repository, index, manifest, version, host.facts_for(manifest))
        mismatches += _steps(steps, manifest, files_only)
        flags += [f for f in server_flags(manifest) if f not in flags]
        builds.append(CheckedBuild(manifest, version, index.versions[version].state))
    return RepositoryCheck(repository, tuple(builds), tuple(mismatches), tuple(flags), index, host.used)


def _steps(steps: StepCheck | None, manifest: Manifest, files_only: bool) -> list[Mismatch]:
    return [] if steps is None or files_only else steps(manifest)


class _Host:
    """This host's facts, read once and only when a plan is to be compared with them."""

    def __init__(self, machine: MachineFacts | None, files_only: bool) -> None:
        self._facts, self._files_only = machine, files_only
        self.used: MachineFacts | None = None

    def facts_for(self, manifest: Manifest) -> MachineFacts | None:
        if self._files_only or manifest.plan is None:
            return None
        if self._facts is None:
            from generator.repository.host import machine_facts

            self._facts = machine_facts()
        self.used = self._facts
        return self._facts
