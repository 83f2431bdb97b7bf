"""Find ``libnvinfer`` and read its version without the ``tensorrt`` Python package.

Triton's server images ship the TensorRT runtime library but not TensorRT's Python bindings, and that
library is what the TensorRT backend deserialises plans with. ``getInferLibVersion`` is its exported C
entry point (NvInferRuntime.h), so ctypes can ask it directly: no CUDA context, no GPU needed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

# The runtime itself, not libnvinfer_plugin/_lean/_dispatch/_vc_plugin: libnvinfer.so, .so.10, .so.10.3.0
_LIBRARY_NAME = re.compile(r"^libnvinfer\.so(\.\d+)*$")
# Where Ubuntu packages (the NGC Triton and TensorRT images) and tarball installs put it.
STANDARD_DIRECTORIES: tuple[str, ...] = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/sbsa-linux-gnu",
    "/usr/local/tensorrt/lib",
    "/opt/tensorrt/lib",
    "/usr/lib64",
    "/usr/local/lib",
)


@dataclass(frozen=True)
class TensorRTLibrary:
    """A loadable libnvinfer and the version it reports."""

    path: Path
    version: str  # "10.3.0"


def decode_version(value: int) -> str:
    """``getInferLibVersion()`` as major.minor.patch.

    TensorRT 10 and later return ``NV_TENSORRT_VERSION_INT(major, minor, patch)`` = major*10000 +
    minor*100 + patch (NvInferRuntimeBase.h); 8.x returned major*1000 + minor*100 + patch.
    """
    if value <= 0:
        raise ValueError(f"getInferLibVersion returned {value}")
    if value >= 10000:
        return f"{value // 10000}.{(value // 100) % 100}.{value % 100}"
    return f"{value // 1000}.{(value // 100) % 10}.{value % 100}"


def library_version(path: Path) -> str:
    """Load ``path`` and ask it for its version; OSError/AttributeError when it is not libnvinfer."""
    library = ctypes.CDLL(str(path))
    function = library.getInferLibVersion
    function.restype = ctypes.c_int32
    function.argtypes = []
    return decode_version(int(function()))


def _ldconfig_paths() -> Iterator[Path]:
    """libnvinfer entries of the dynamic linker's cache (``ldconfig -p``)."""
    exe = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None)
    if exe is None:
        return
    try:
        listing = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return
    for line in listing.splitlines():
        name, _, target = line.strip().partition(" => ")
        if _LIBRARY_NAME.match(name.split(" ", 1)[0]) and target:
            yield Path(target.strip())


def _in_directories(directories: Iterable[str]) -> Iterator[Path]:
    for directory in directories:
        folder = Path(directory)
        if not folder.is_dir():
            continue
        # Highest soname first: a folder holding two majors is served by the newer.
        found = [p for p in folder.iterdir() if _LIBRARY_NAME.match(p.name)]
        yield from sorted(found, key=lambda p: [int(n) for n in re.findall(r"\d+", p.name)], reverse=True)


def candidate_paths(environ: Mapping[str, str] | None = None,
                    standard: Iterable[str] = STANDARD_DIRECTORIES) -> list[Path]:
    """Where a process started here would find libnvinfer, in the loader's order, without duplicates.

    LD_LIBRARY_PATH first (the NGC images set it), then the ``ldconfig`` cache, then the standard folders.
    """
    env = os.environ if environ is None else environ
    search = [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    seen: set[Path] = set()
    ordered: list[Path] = []
    for path in (*_in_directories(search), *_ldconfig_paths(), *_in_directories(standard)):
        if path not in seen:
            seen.add(path)
            ordered.append(path)
    return ordered


def find_tensorrt_library(environ: Mapping[str, str] | None = None,
                          standard: Iterable[str] = STANDARD_DIRECTORIES) -> TensorRTLibrary | None:
    """The first candidate that loads and answers ``getInferLibVersion``, or None."""
    for path in candidate_paths(environ, standard):
        try:
            return TensorRTLibrary(path, library_version(path))
        except (OSError, AttributeError, ValueError):
            continue
    return None
