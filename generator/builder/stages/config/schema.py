"""Triton 2.51's own ``model_config.proto``, so that configs are parsed as the embedded server parses them.

The project's tritonclient (2.73) carries a newer schema: a field Triton 2.51 does not know would pass its parse
and then fail ``ReadTextProto`` when the server loads the model. The 2.51 schema is the serialized file descriptor
in the ``model_config_pb2.py`` that tritonclient 2.51 generated; it is read as data (never run) and loaded into a
private descriptor pool, beside the 2.73 schema in the default one.

A build reads that descriptor from one small file under the server cache (``schemas/``), made once: from the
tritonclient 2.51 wheel pinned by hash in ``locks/perf-analyzer.txt`` (its ``py3-none-any`` build, about 100 kB,
without the perf_analyzer binary), fetched with pip, or from the perf_analyzer environment when that is already
there (no network then). Only the descriptor is kept, not an environment: the builder needs nothing else from the
wheel, and one file is quick to make and easy to bake into an image. ``python -m generator build --prepare`` makes
it ahead of time; a build that finds it missing makes it then, and fails with one line naming ``build --prepare``
when the package index cannot be reached.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import re
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from generator.cache import cache_root
from generator.errors import ServerError
from generator.server.embedded import TRITON_VERSION
from generator.server.environments import PERF_ANALYZER, Environment, is_verified

logger = logging.getLogger(__name__)

MESSAGE = "inference.ModelConfig"
GENERATED = "tritonclient/grpc/model_config_pb2.py"  # in the wheel and in an environment's site-packages
PREPARE = "python -m generator build --prepare"
# The tritonclient entry of the lock: the pinned version and the sha256 of every wheel it may install.
_WHEEL_ENTRY = re.compile(r"^tritonclient==(?P<version>\S+)(?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+", re.MULTILINE)


class SchemaUnavailableError(ServerError):
    """Triton 2.51's config schema is not prepared here and cannot be made now."""


def wheel_requirement() -> tuple[str, str]:
    """The lock's tritonclient requirement (version and hashes, as pip reads it) and its version."""
    found = _WHEEL_ENTRY.search(PERF_ANALYZER.lock.read_text())
    if found is None:
        raise ServerError(f"{PERF_ANALYZER.lock.name} pins no tritonclient wheel with hashes")
    return found.group(0), found.group("version")


def schema_file(cache: Path | None = None) -> Path:
    """Where the prepared descriptor lives: named after the pinned wheel's hashes, so a new pin makes a new file."""
    requirement, version = wheel_requirement()
    digest = hashlib.sha256(requirement.encode()).hexdigest()[:16]
    return (cache or cache_root()) / "schemas" / f"model_config-tritonclient-{version}-{digest}.pb"


def prepare_schema(cache: Path | None = None) -> tuple[Path, str | None]:
    """Make the descriptor file once; returns its path and where it came from (None: it was already there)."""
    path = schema_file(cache)
    if path.is_file():
        return path, None
    data, source = _descriptor(cache or cache_root())
    _check(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(data)
    staged = Path(handle.name)
    staged.chmod(0o644)  # an image prepares it as root and builds as another user
    staged.replace(path)  # a concurrent preparation writes the same bytes
    return path, source


@lru_cache(maxsize=1)
def model_config_class() -> type[message.Message]:
    """The ``ModelConfig`` message class of Triton 2.51 (its descriptor is prepared on first use)."""
    path, source = prepare_schema()
    if source is not None:
        logger.info("Prepared Triton %s's config schema in %s (from %s); `%s` does this ahead of time, for an "
                    "image or a machine without the network", TRITON_VERSION, path, source, PREPARE)
    return _message_class(path.read_bytes())


def _message_class(data: bytes) -> type[message.Message]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(data))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(MESSAGE))


def _check(data: bytes) -> None:
    try:
        _message_class(data)
    except (KeyError, TypeError, ValueError) as exc:  # DecodeError is a ValueError
        raise ServerError(f"the tritonclient {TRITON_VERSION} schema does not define {MESSAGE} ({exc})") from exc


def _descriptor(cache: Path) -> tuple[bytes, str]:
    """The descriptor from the perf_analyzer environment when it is there, else from the pinned wheel."""
    root = PERF_ANALYZER.location(cache)
    generated = Environment(root).site_packages / GENERATED
    if is_verified(root, PERF_ANALYZER) and generated.is_file():
        return serialized_descriptor(generated.read_text()), f"the {PERF_ANALYZER.name} environment"
    requirement, version = wheel_requirement()
    with tempfile.TemporaryDirectory(prefix="tde-schema-") as tmp:
        wheel = _download(requirement, Path(tmp))
        with zipfile.ZipFile(wheel) as archive:
            # At the top of the wheel, or under tritonclient-<version>.data/purelib/ as the 2.51 wheels have it.
            names = [n for n in archive.namelist() if n == GENERATED or n.endswith(f"/purelib/{GENERATED}")]
            if not names:
                raise ServerError(f"{wheel.name} has no {GENERATED}")
            generated_text = archive.read(names[0]).decode()
    return serialized_descriptor(generated_text), f"the hash-pinned tritonclient {version} wheel"


def _download(requirement: str, directory: Path) -> Path:
    """pip fetches the ``py3-none-any`` wheel of the pinned requirement, checking its hash."""
    (directory / "requirement.txt").write_text(requirement + "\n")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-input",
               "--no-deps", "--require-hashes", "--only-binary=:all:", "--platform", "any", "--python-version",
               python, "--dest", str(directory / "wheel"), "-r", str(directory / "requirement.txt")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted((directory / "wheel").glob("*.whl"))
    if result.returncode != 0 or not wheels:
        lines = [line.strip() for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        said = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "nothing")
        raise SchemaUnavailableError(
            f"Triton {TRITON_VERSION}'s config schema is not prepared on this machine and the package index cannot "
            f"be reached: run `{PREPARE}` where the network is (or in the image build; it writes one file under "
            f"{cache_root()}, the server cache, TRITON_DETECTION_CACHE) (pip: {said[:200]})")
    return wheels[0]


def serialized_descriptor(generated: str) -> bytes:
    """The bytes protoc put into ``AddSerializedFile(b'...')`` of a generated ``_pb2.py``, without running it."""
    for node in ast.walk(ast.parse(generated)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and node.args):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise ServerError("no serialized file descriptor (AddSerializedFile) in the generated model_config_pb2.py")
