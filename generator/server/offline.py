"""Offline installs of the embedded server: one archive made on a connected machine, installed with no index.

``python -m generator archive --stub-env cpu,gpu --python 3.12 --machine x86_64 [--schema] [--runtime
client,loadtest] [--split 50M]`` writes ``tde-offline-<stubs>-py<X.Y>-<machine>.tar`` (or its numbered parts,
archive_parts.py):

    tde-offline.json   the index, first: format, target, the locks' names and sha256, every member's size and sha256
    triton/            the nvidia-pytriton wheel that carries Triton 2.51 (sha256 pinned in embedded.py)
    stub/              the wheels of locks/stub-<cpu|gpu>.txt for that Python and machine (sha256 in the locks;
                       a wheel both locks pin travels once)
    perf/              optional (``--schema``): the wheels of locks/perf-analyzer.txt the stub folder lacks: Triton
                       2.51's config schema, which ``generator build`` parses configs with, and perf_analyzer
    runtime/           optional: this project's wheel and its extras' dependencies for that platform, with a
                       requirements.txt; what the target already has (``--present FILE``) is left out

The wheels are the published files, uncompressed in the tar (they are zip files already: xz gains 2 %), so the
lock's hashes hold on the target. ``python -m generator serve --prepare --from-archive FILE|PART`` reads it once
into a temporary folder and checks everything before it installs anything: every part present and whole, the
index first, the target this machine's Python and architecture, the locks those of this checkout, every member
listed with its size and sha256, nothing unlisted, nothing missing, each locked wheel's sha256 one its lock pins,
the server wheel's the pinned one. Only then are the server unpacked, the stub environment made with
``pip --no-index --require-hashes`` from those wheels, and the runtime environment (a venv that sees the invoking
interpreter's packages and adds the carried ones) made. A refused archive names the problem and installs nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import __version__
from generator.archive.indexed_tar import IndexedTar, file_entries, members_of, publish
from generator.archive.parts import sha256_file
from generator.errors import ServerError
from generator.server.embedded import (
    PYTRITON_VERSION,
    STUB_PYTHONS,
    WHEEL_PLATFORM,
    WHEEL_SHA256,
    ServerInstall,
    ensure_server,
    verify_wheel,
)
from generator.server.environments import (
    PERF_ANALYZER,
    STUB_ENVIRONMENTS,
    Environment,
    LockedEnvironment,
    ensure_environment,
    ensure_runtime,
)

logger = logging.getLogger(__name__)

FORMAT = 1
INDEX = "tde-offline.json"
PROJECT = "triton-detection-ensemble"
_MEMBER = re.compile(r"^(triton|stub|perf|runtime)/[A-Za-z0-9._+-]+$")
_LOCK_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Target:
    """The machine an archive is for: its Python (X.Y), architecture and stub environments ("gpu", "cpu,gpu")."""

    python: str
    machine: str
    stub: str

    def __post_init__(self) -> None:
        unknown = [s for s in self.stubs if s not in STUB_ENVIRONMENTS]
        if unknown or not self.stubs:
            raise ServerError(f"--stub-env takes {' and/or '.join(STUB_ENVIRONMENTS)} (comma-separated), "
                              f"not {self.stub!r}")
        if self.machine not in WHEEL_SHA256:
            raise ServerError(f"the embedded Triton exists for {', '.join(WHEEL_SHA256)}, not {self.machine!r}")
        if self.python not in STUB_PYTHONS:
            raise ServerError(f"the embedded Triton has stubs for Python {', '.join(STUB_PYTHONS)}, not {self.python!r}")
        for locked in self.lockeds:
            if tuple(int(p) for p in self.python.split(".")) < locked.min_python:
                wanted = ".".join(map(str, locked.min_python))
                raise ServerError(f"the {locked.name} environment needs Python >= {wanted}, not {self.python}")

    @classmethod
    def here(cls, stub: str) -> Target:
        return cls(f"{sys.version_info.major}.{sys.version_info.minor}", platform.machine(), stub)

    @property
    def stubs(self) -> tuple[str, ...]:
        return tuple(sorted({s.strip() for s in self.stub.split(",") if s.strip()}))

    @property
    def lockeds(self) -> tuple[LockedEnvironment, ...]:
        return tuple(STUB_ENVIRONMENTS[s] for s in self.stubs if s in STUB_ENVIRONMENTS)

    @property
    def names(self) -> str:
        return " and ".join(locked.name for locked in self.lockeds)

    @property
    def stem(self) -> str:
        return f"tde-offline-{'-'.join(self.stubs)}-py{self.python}-{self.machine}"

    def pip_platform(self) -> list[str]:
        """pip download arguments for wheels of this target (glibc 2.17 .. 2.39, CPython ``python``)."""
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in (39, 35, 34, 31, 28, 27, 26, 24, 17)]
        tags += [f"manylinux2014_{self.machine}"] + ([f"manylinux1_{self.machine}"] if self.machine == "x86_64" else [])
        return ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp",
                *(arg for tag in tags for arg in ("--platform", tag))]


@dataclass(frozen=True)
class RuntimeSpec:
    """The project's own runtime for the target: its extras, minus what the target has (``name[==version]``)."""

    extras: tuple[str, ...]
    present: tuple[str, ...] = ()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(filename: str) -> str:
    return canonical(filename.split("-", 1)[0])


def lock_hashes(lock_text: str) -> dict[str, str]:
    """sha256 -> the pinned ``name==version`` it belongs to, for every hash of a lock file."""
    hashes: dict[str, str] = {}
    for entry in re.split(r"\n(?=[A-Za-z])", lock_text):
        pin = _LOCK_PIN.match(entry.strip())
        if pin:
            hashes.update(dict.fromkeys(_HASH.findall(entry), f"{canonical(pin.group(1))}=={pin.group(2)}"))
    return hashes


# --- making an archive (a connected machine) ------------------------------------------------------------------


def _pip_download(target: Target, destination: Path, *args: str) -> None:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-input",
               *target.pip_platform(), "--dest", str(destination), *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServerError(f"pip download {' '.join(args)} failed for Python {target.python} on {target.machine} "
                          f"(check access to the package index): {result.stderr.strip()[-500:]}")


def _download_runtime(target: Target, spec: RuntimeSpec, destination: Path, scratch: Path) -> None:
    """This project's wheel (built from the checkout) and its extras' dependencies for the target, minus
    what the target has; a ``requirements.txt`` that installs them."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise ServerError("--runtime builds this project's wheel: run python -m generator archive from a checkout")
    destination.mkdir(parents=True)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(root), "-w",
                            str(destination)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise ServerError(f"could not build this project's wheel: {built.stderr.strip()[-400:]}")
    requirement = f"{PROJECT}[{','.join(spec.extras)}]=={__version__}" if spec.extras else f"{PROJECT}=={__version__}"
    constraints = scratch / "present.txt"
    constraints.write_text("".join(f"{line}\n" for line in spec.present if "==" in line))
    _pip_download(target, destination, "--find-links", str(destination), "-c", str(constraints), requirement)
    present = {canonical(re.split(r"[=<>!~ ;\[]", line, maxsplit=1)[0]) for line in spec.present}
    for wheel in destination.glob("*.whl"):
        if wheel_project(wheel.name) in present:
            wheel.unlink()
    (destination / "requirements.txt").write_text(requirement + "\n")


def _drop_duplicates(folder: Path, kept: list[Path]) -> None:
    """Wheels of ``folder`` that ``kept`` holds byte for byte go once (installs read every folder)."""
    have = {sha256_file(wheel) for other in kept for wheel in other.glob("*.whl")}
    for wheel in folder.glob("*.whl"):
        if sha256_file(wheel) in have:
            wheel.unlink()


def make_archive(target: Target, output: Path, runtime: RuntimeSpec | None = None,
                 split_bytes: int | None = None, schema: bool = False) -> list[Path]:
    """Download what the target needs and write the archive into ``output``: its path, or its parts. ``schema``
    adds the perf-analyzer environment (Triton 2.51's config schema, which builds parse with, and perf_analyzer),
    so that ``generator build`` works there too."""
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output, prefix=".tde-archive-") as tmp:
        payload = Path(tmp) / "payload"
        (payload / "stub").mkdir(parents=True)
        _pip_download(target, payload / "triton", "--no-deps", "--platform", WHEEL_PLATFORM[target.machine],
                      f"nvidia-pytriton=={PYTRITON_VERSION}")
        (wheel,) = (payload / "triton").glob("*.whl")
        verify_wheel(wheel, target.machine)
        for locked in target.lockeds:  # one folder: a wheel two locks pin is carried once
            _pip_download(target, payload / "stub", "--no-deps", "--require-hashes", "-r", str(locked.lock))
        if schema:
            _pip_download(target, payload / "perf", "--no-deps", "--require-hashes", "-r", str(PERF_ANALYZER.lock))
            _drop_duplicates(payload / "perf", [payload / "stub"])
        if runtime is not None:
            _download_runtime(target, runtime, payload / "runtime", Path(tmp))
            _drop_duplicates(payload / "runtime", [payload / "stub", payload / "perf"])
        members = members_of(payload)
        index = {"format": FORMAT, "tool_version": __version__,
                 "target": {**target.__dict__, "stub": ",".join(target.stubs)},
                 "locks": [{"name": locked.lock.name, "sha256": locked.digest()} for locked in target.lockeds],
                 "schema": {"name": PERF_ANALYZER.lock.name, "sha256": PERF_ANALYZER.digest()} if schema else None,
                 "runtime": list(runtime.extras) if runtime else None,
                 "files": file_entries(members)}
        return publish(Path(tmp) / f"{target.stem}.tar", output, INDEX, index, members, split_bytes)


# --- verifying and installing (the offline machine) -----------------------------------------------------------


@dataclass(frozen=True)
class VerifiedArchive:
    """An archive read into ``root`` with every check passed."""

    root: Path
    index: dict[str, Any]
    target: Target

    @property
    def server_wheel(self) -> Path:
        (wheel,) = (self.root / "triton").glob("*.whl")
        return wheel

    @property
    def runtime(self) -> Path | None:
        folder = self.root / "runtime"
        return folder if (folder / "requirements.txt").is_file() else None


@dataclass(frozen=True)
class Installed:
    server: ServerInstall
    stubs: dict[str, Environment]  # lock name (stub-cpu, stub-gpu) -> its environment
    runtime: Environment | None
    schema: Environment | None = None


def _refuse(archive: str, problem: str) -> ServerError:
    return ServerError(f"refusing the archive {archive}: {problem}; nothing was installed")


_ARCHIVE = IndexedTar(INDEX, FORMAT, _MEMBER.match, "python -m generator archive", _refuse)


def _check_target(index: dict[str, Any], name: str) -> Target:
    try:
        target = Target(**index["target"])
    except (TypeError, KeyError, ServerError) as exc:
        raise _refuse(name, f"its target is unusable ({exc})") from None
    here = Target.here(target.stub)
    if (target.python, target.machine) != (here.python, here.machine):
        raise _refuse(name, f"it is for Python {target.python} on {target.machine}, this is Python {here.python} on "
                            f"{here.machine}; make one with python -m generator archive --python {here.python} "
                            f"--machine {here.machine} --stub-env {target.stub}")
    recorded = {entry.get("name"): entry.get("sha256") for entry in [*(index.get("locks") or []), index.get("schema")]
                if isinstance(entry, dict)}
    wanted = [*target.lockeds, *([PERF_ANALYZER] if index.get("schema") else [])]
    for locked in wanted:
        if recorded.get(locked.lock.name) != locked.digest():
            raise _refuse(name, f"it was made from another {locked.lock.name} (sha256 {recorded.get(locked.lock.name)}, "
                                f"this checkout's is {locked.digest()}); make it again with this version")
    return target


def _check_pins(archive: VerifiedArchive, name: str) -> None:
    """Each stub wheel must be one the lock pins (its sha256 among the lock's); the server wheel the pinned one."""
    for folder, lockeds in (("stub", archive.target.lockeds), ("perf", (PERF_ANALYZER,))):
        wheels = sorted((archive.root / folder).glob("*"))
        pins = {sha for locked in lockeds for sha in lock_hashes(locked.lock.read_text())} if wheels else set()
        for wheel in wheels:
            if sha256_file(wheel) not in pins:
                which = " or ".join(locked.lock.name for locked in lockeds)
                raise _refuse(name, f"{folder}/{wheel.name} is not a wheel {which} pins (its sha256 is none of the lock's)")
    wheels = list((archive.root / "triton").glob("*.whl"))
    if len(wheels) != 1:
        raise _refuse(name, f"it holds {len(wheels)} server wheels, not one")
    try:
        verify_wheel(wheels[0], archive.target.machine)
    except ServerError as exc:
        raise _refuse(name, str(exc)) from None


def verify_archive(given: Path, root: Path) -> VerifiedArchive:
    """Read the archive (one file or the parts ``given`` belongs to) into ``root``, checking everything."""
    found: list[Target] = []
    index = _ARCHIVE.read_verified(given, root, lambda index: found.append(_check_target(index, given.name)))
    archive = VerifiedArchive(root, index, found[0])
    _check_pins(archive, given.name)
    return archive


def install_archive(given: Path, cache: Path, stub: str | None = None) -> Installed:
    """Verify the archive, then unpack the server and make the stub (and runtime) environments from it;
    ``stub`` ("cpu", "gpu") refuses an archive of the other stub environment."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".tde-offline-") as tmp:
        archive = verify_archive(given, Path(tmp))
        if stub is not None and stub not in archive.target.stubs:
            raise _refuse(given.name, f"it holds the {archive.target.names} environment, not stub-{stub}")
        logger.info("Archive %s verified: %d files, for Python %s on %s, %s environment", given.name,
                    len(archive.index["files"]), archive.target.python, archive.target.machine, archive.target.stub)
        server = ensure_server(archive.server_wheel)
        folders = [archive.root / "stub", archive.root / "perf"]
        stubs = {locked.name: ensure_environment(locked, cache, folders) for locked in archive.target.lockeds}
        schema = ensure_environment(PERF_ANALYZER, cache, folders) if archive.index.get("schema") else None
        runtime = None
        if archive.runtime is not None:
            runtime = ensure_runtime(cache, archive.runtime, _runtime_digest(archive.index), folders)
    return Installed(server, stubs, runtime, schema)


def _runtime_digest(index: dict[str, Any]) -> str:
    runtime = {name: entry["sha256"] for name, entry in sorted(index["files"].items()) if name.startswith("runtime/")}
    return hashlib.sha256(json.dumps(runtime, sort_keys=True).encode()).hexdigest()
