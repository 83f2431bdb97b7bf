"""The docker CLI, run as a child process: one place for timeouts and for errors that say what failed."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from deploy.errors import LocalStackError

logger = logging.getLogger(__name__)


def run(args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float | None = None,
        capture: bool = True, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """``docker ARGS``; with ``check`` a non-zero exit raises LocalStackError with the end of its output.

    Without ``capture`` its output goes to our stderr: stdout stays for what a command prints as its result.
    """
    command = ["docker", *args]
    shown = subprocess.PIPE if capture else _stderr()
    logger.debug("running %s", " ".join(command))
    try:
        result = subprocess.run(
            command, env={**os.environ, **(env or {})}, timeout=timeout_s, check=False, text=True,
            input=stdin.decode() if stdin is not None else None,
            stdout=shown, stderr=shown,
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalStackError(f"`{' '.join(command[:4])} ...` did not finish within {timeout_s:g} s") from exc
    except FileNotFoundError as exc:
        raise LocalStackError("no docker command: install Docker Engine and Compose (deploy/README.md)") from exc
    if check and result.returncode != 0:
        said = ((result.stderr or "") + (result.stdout or "")).strip()[-800:] if capture else "see above"
        raise LocalStackError(f"`{' '.join(command[:4])} ...` failed (exit {result.returncode}): {said}")
    return result


def _stderr() -> IO[Any] | int | None:
    """Our stderr as a file the child can write to (None, the inherited one, where it has no descriptor)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, io.UnsupportedOperation, ValueError):
        return None
    return sys.stderr


def image_label(image: str, label: str) -> str | None:
    """The value of ``label`` on a local image, "" when it has none, None when the image is not here."""
    result = run(["image", "inspect", "--format", f'{{{{ index .Config.Labels "{label}" }}}}', image], check=False)
    if result.returncode != 0:
        return None
    value = result.stdout.strip()
    return "" if value == "<no value>" else value


def has_image(image: str) -> bool:
    return run(["image", "inspect", "--format", "{{.Id}}", image], check=False).returncode == 0


def image_id(image: str) -> str | None:
    """The local image's ID, None when it is not here."""
    result = run(["image", "inspect", "--format", "{{.Id}}", image], check=False)
    return result.stdout.strip() if result.returncode == 0 else None


def require_image_id(image: str) -> str:
    """The local image's ID; LocalStackError with docker's own words when it is not here."""
    return run(["image", "inspect", "--format", "{{.Id}}", image]).stdout.strip()


def remove_superseded(before: Mapping[str, str | None]) -> None:
    """Remove the images that a build moved ``before``'s tags away from, once nothing else names them.

    Every rebuild after a change leaves the old image untagged; at 0.7 GB a Triton image, a working day of
    builds filled CI's disk. An old image still tagged elsewhere or used by a container stays (docker refuses).
    """
    for image, old in before.items():
        if old is None or image_id(image) in (None, old):
            continue
        tags = run(["image", "inspect", "--format", "{{len .RepoTags}}", old], check=False).stdout.strip()
        if tags != "0":
            continue
        removed = run(["image", "rm", old], check=False)
        if removed.returncode == 0:
            logger.info("removed %s's previous image %s", image, old[:19])
        else:
            logger.info("kept %s's previous image %s: %s", image, old[:19], removed.stderr.strip()[-200:])
