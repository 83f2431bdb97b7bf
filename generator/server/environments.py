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
from dataclasses import dataclass
from pathlib import Path

from generator.errors import ServerError

logger = logging.getLogger(__name__)

LOCKS = Path(__file__).parent / "locks"
DIGEST_FILE = "lock.sha256"  # written last: an environment without it was never finished
_PYTHON_GPU_CONFIG = re.compile(r'backend\s*:\s*"python"[\s\S]*\bkind\s*:\s*KIND_GPU\b')


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
STUB_ENVIRONMENTS = {"cpu": STUB_CPU, "gpu": STUB_GPU}


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
    """The GPU stub environment when a Python-backend model of the repositories has KIND_GPU instances."""
    for repository in repositories:
        for config in repository.glob("*/config.pbtxt"):
            if _PYTHON_GPU_CONFIG.search(config.read_text(errors="replace")):
                return STUB_GPU
    return STUB_CPU


def is_verified(root: Path, locked: LockedEnvironment) -> bool:
    """True when ``root`` was finished from exactly this lock (its recorded sha256 equals the lock's)."""
    recorded = root / DIGEST_FILE
    return recorded.is_file() and recorded.read_text().strip() == locked.digest()


def ensure_environment(locked: LockedEnvironment, cache: Path) -> Environment:
    """Return the environment of ``locked``, creating it the first time (pip, hashes required)."""
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
        _create(staging, locked)
        try:
            staging.rename(root)
        except OSError:  # another process finished it first
            if not is_verified(root, locked):
                raise
    return Environment(root)


def _create(staging: Path, locked: LockedEnvironment) -> None:
    """A venv of this interpreter with the lock installed; the digest file is written only after pip succeeded."""
    _run([sys.executable, "-m", "venv", str(staging)], f"could not create a virtual environment in {staging}")
    pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-input", "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", str(locked.lock)]
    _run(pip, f"could not install {locked.lock.name} (check access to the package index)")
    (staging / DIGEST_FILE).write_text(locked.digest() + "\n")


def _run(command: list[str], failure: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()[-600:]
        raise ServerError(f"{failure}; it said: {said}")
