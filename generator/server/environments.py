"""Python environments of their own for the embedded server's stubs and for perf_analyzer, made from lock files.

The Python-backend stub of Triton 2.51 is built with pybind11 2.10 and breaks on numpy 2 (a BYTES input kills
it, ``pb_utils.Tensor`` outputs arrive empty, DLPack round trips return wrong values), while the user's
environment moves on to numpy 2. So the stubs run in a virtual environment under the server cache, installed
with ``pip --require-hashes`` from ``locks/<name>.txt`` and named after the lock's sha256: a changed lock gets a
new environment, and one whose recorded digest does not match its lock is made again. The stub embeds the
interpreter of the first ``python`` on ``PATH`` (``sys.prefix`` is found from it), so ``bin/`` of the
environment first on ``PATH`` is all it takes (generator/server/embedded.py).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import ServerError

logger = logging.getLogger(__name__)

LOCKS = Path(__file__).parent / "locks"
DIGEST_FILE = "lock.sha256"  # written last: an environment without it was never finished
_PYTHON_GPU_CONFIG = re.compile(r'backend\s*:\s*"python"[\s\S]*\bkind\s*:\s*KIND_GPU\b')
_OPENVINO_CONFIG = re.compile(r'key\s*:\s*"cpu_engine"\s*value\s*\{\s*string_value\s*:\s*"openvino"')


@dataclass(frozen=True)
class LockedEnvironment:
    """One lock file under ``locks/`` and the oldest Python its pins have wheels for."""

    name: str
    min_python: tuple[int, int] = (3, 10)

    @property
    def lock(self) -> Path:
        return LOCKS / f"{self.name}.txt"

    def digest(self) -> str:
        return hashlib.sha256(self.lock.read_bytes()).hexdigest()

    def location(self, cache: Path) -> Path:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        return cache / "environments" / f"{self.name}-py{python}-{self.digest()[:16]}"


STUB_CPU = LockedEnvironment("stub-cpu")
STUB_GPU = LockedEnvironment("stub-gpu", min_python=(3, 11))  # onnxruntime-gpu 1.31 has no 3.10 wheels
PERF_ANALYZER = LockedEnvironment("perf-analyzer")
STUB_OPENVINO = LockedEnvironment("stub-openvino")  # stub-cpu's pins and OpenVINO (--cpu-engine openvino)
STUB_ENVIRONMENTS = {"cpu": STUB_CPU, "gpu": STUB_GPU, "openvino": STUB_OPENVINO}


@dataclass(frozen=True)
class Environment:
    """A finished environment: its folder and interpreter."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def stub_environment_for(repositories: list[Path]) -> LockedEnvironment:
    """The GPU stub environment when a Python-backend model of the repositories has KIND_GPU instances, the
    OpenVINO one when a detector runs on OpenVINO (``--cpu-engine openvino``), else the CPU one."""
    texts = [config.read_text(errors="replace") for repository in repositories
             for config in sorted(repository.glob("*/config.pbtxt"))]
    gpu = any(_PYTHON_GPU_CONFIG.search(text) for text in texts)
    openvino = any(_OPENVINO_CONFIG.search(text) for text in texts)
    if gpu and openvino:
        raise ServerError("these repositories need two stub environments: a GPU step (KIND_GPU) and a detector "
                          "built with --cpu-engine openvino; serve them on separate servers, or rebuild one")
    return STUB_GPU if gpu else STUB_OPENVINO if openvino else STUB_CPU


def is_verified(root: Path, locked: LockedEnvironment) -> bool:
    """True when ``root`` was finished from exactly this lock (its recorded sha256 equals the lock's)."""
    recorded = root / DIGEST_FILE
    return recorded.is_file() and recorded.read_text().strip() == locked.digest()


def ensure_environment(locked: LockedEnvironment, cache: Path, wheelhouse: Sequence[Path] = ()) -> Environment:
    """Return the environment of ``locked``, creating it the first time (pip, hashes required): from the package
    index, or with ``wheelhouse`` from those folders alone (an offline archive's wheels, generator/server/offline.py)."""
    if sys.version_info[:2] < locked.min_python:
        wanted = ".".join(map(str, locked.min_python))
        raise ServerError(f"the {locked.name} environment needs Python >= {wanted} (its pins have no wheels for "
                          f"{sys.version_info.major}.{sys.version_info.minor}); create the project's "
                          f"environment with a newer Python")
    root = locked.location(cache)
    if is_verified(root, locked):
        return Environment(root)
    if root.exists():
        logger.warning("%s does not match %s (unfinished or changed); making it again", root, locked.lock.name)
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    logger.info("Creating the %s environment in %s from %s ...", locked.name, root, locked.lock.name)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{locked.name}-") as tmp:
        staging = Path(tmp) / "env"
        _create(staging, locked, wheelhouse)
        try:
            staging.rename(root)
        except OSError:  # another process finished it first
            if not is_verified(root, locked):
                raise
    return Environment(root)


def _create(staging: Path, locked: LockedEnvironment, wheelhouse: Sequence[Path] = ()) -> None:
    """A venv of this interpreter with the lock installed; the digest file is written only after pip succeeded.

    The venv gets no pip of its own (``ensurepip`` is missing from some system Pythons): this interpreter's pip
    installs into it (``pip --python``)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(staging)],
         f"could not create a virtual environment in {staging}")
    # --isolated: no pip configuration or PIP_* variable adds another source to an offline install.
    source = ["--isolated", "--no-index", *(a for f in wheelhouse for a in ("--find-links", str(f)))] if wheelhouse else []
    pip = [*pip_into(staging), "--require-hashes", "--no-deps", "--only-binary=:all:", *source,
           "-r", str(locked.lock)]
    where = f"from {', '.join(map(str, wheelhouse))}" if wheelhouse else "(check access to the package index)"
    _run(pip, f"could not install {locked.lock.name} {where}")
    (staging / DIGEST_FILE).write_text(locked.digest() + "\n")


def pip_into(root: Path, pip_version: tuple[int, ...] | None = None) -> list[str]:
    """This interpreter's pip, installing into the environment at ``root``: ``pip --python`` (pip >= 22.3), or
    with an older pip ``--prefix`` into the environment's folders (what is installed here is then not reused)."""
    common = ["install", "--quiet", "--disable-pip-version-check", "--no-input"]
    if (pip_version or _pip_version()) >= (22, 3):
        return [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), *common]
    return [sys.executable, "-m", "pip", *common, "--prefix", str(root), "--ignore-installed",
            "--no-warn-script-location"]


def _pip_version() -> tuple[int, ...]:
    try:
        from importlib.metadata import version

        return tuple(int(part) for part in re.findall(r"\d+", version("pip"))[:2])
    except Exception:  # noqa: BLE001 -- no pip metadata: the --prefix way works with any pip
        return (0,)


def _run(command: list[str], failure: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()[-600:]
        raise ServerError(f"{failure}; it said: {said}")


RUNTIME = "runtime"


def ensure_runtime(cache: Path, wheelhouse: Path, digest: str, also: Sequence[Path] = ()) -> Environment:
    """The project's runtime from an offline archive's ``runtime/`` folder: a venv that sees this interpreter's
    packages (a ``.pth`` of its site folders) and gets from ``wheelhouse`` alone what they lack, so a GPU host's
    own numpy, OpenCV or gRPC are used where they fit and nothing is installed twice. ``also``: more folders
    of wheels (the stub's, which the archive does not carry twice)."""
    root = cache / "environments" / f"{RUNTIME}-py{sys.version_info.major}.{sys.version_info.minor}-{digest[:16]}"
    recorded = root / DIGEST_FILE
    if recorded.is_file() and recorded.read_text().strip() == digest:
        return Environment(root)
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{RUNTIME}-") as tmp:
        staging = Path(tmp) / "env"
        _run([sys.executable, "-m", "venv", "--without-pip", str(staging)],
             f"could not create a virtual environment in {staging}")
        sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
        (Environment(staging).site_packages / "tde-host-packages.pth").write_text("".join(f"{p}\n" for p in sites))
        more = [a for folder in also for a in ("--find-links", str(folder))]
        _run([*pip_into(staging), "--isolated", "--no-index", "--find-links", str(wheelhouse), *more, "-r",
              str(wheelhouse / "requirements.txt")], f"could not install the project's runtime from {wheelhouse}")
        (staging / DIGEST_FILE).write_text(digest + "\n")
        staging.rename(root)
    return Environment(root)
