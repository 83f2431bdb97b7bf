"""The Docker Engine and Compose the stack needs, checked before anything starts.

``healthcheck.start_interval`` (every health check of the compose file) needs the Engine API 1.44, i.e.
Docker Engine 25 (moby/moby #40894; Compose refuses it on older engines: "feature require Docker Engine
v25 or later"), and a Compose v2 that passes it on (docker/compose #11360, in 2.24).
"""

from __future__ import annotations

import re
import shutil
import subprocess

from deploy.errors import DeployError
from deploy.settings import MIN_COMPOSE, MIN_ENGINE

_VERSION_RE = re.compile(r"(\d+)\.(\d+)")


class EngineError(DeployError):
    """No Docker Engine or Compose that can run the stack; the message says what to install or start."""


def version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of '26.1.5+dfsg1', 'v2.26.1', '2.26.1-4'; None when there is no version in it."""
    match = _VERSION_RE.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _run(command: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"`{' '.join(command)}` did not answer within {timeout_s:g} s") from exc


def engine_version() -> tuple[int, int]:
    """The daemon's version; EngineError when there is no docker CLI or no daemon answering it."""
    if shutil.which("docker") is None:
        raise EngineError(f"no docker command: install Docker Engine >= {version_text(MIN_ENGINE)} and Compose "
                          f">= {version_text(MIN_COMPOSE)} (deploy/README.md, 'Docker Engine and Compose')")
    result = _run(["docker", "version", "--format", "{{.Server.Version}}"])
    version = parse_version(result.stdout) if result.returncode == 0 else None
    if version is None:
        said = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no answer"]
        raise EngineError(f"no Docker daemon answers ({said[0]}); start dockerd (deploy/README.md)")
    return version


def compose_version() -> tuple[int, int]:
    result = _run(["docker", "compose", "version", "--short"])
    version = parse_version(result.stdout) if result.returncode == 0 else None
    if version is None:
        raise EngineError(f"no Docker Compose v2 plugin (`docker compose`): install Compose >= "
                          f"{version_text(MIN_COMPOSE)} (Debian: docker-compose, Docker's: docker-compose-plugin)")
    return version


def check_engine() -> tuple[tuple[int, int], tuple[int, int]]:
    """Both versions, or EngineError naming the one below the floor and why the stack needs it."""
    engine, compose = engine_version(), compose_version()
    if engine < MIN_ENGINE:
        raise EngineError(f"Docker Engine {version_text(engine)} is older than {version_text(MIN_ENGINE)}: the stack's "
                          "health checks use start_interval (Engine API 1.44); Debian 12's docker.io is 20.10, "
                          "see deploy/README.md for Engine 26 from Debian 13's packages")
    if compose < MIN_COMPOSE:
        raise EngineError(f"Docker Compose {version_text(compose)} is older than {version_text(MIN_COMPOSE)}, the "
                          "first to pass healthcheck start_interval to the engine")
    return engine, compose
