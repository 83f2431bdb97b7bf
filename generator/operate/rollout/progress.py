"""The rollout under way, kept in the repository (``rollout.json``) beside the index.

A rollout writes it before it loads the candidate and updates its phase as it goes (observing, promoting,
watching); it removes it once its decision is carried out. A rollout that finds one left behind (its process or
container was killed, or its Triton restarted and it could not finish) ends that one first, safe: the version that
was stable before it serves again, the route goes back to the alias, and a decision record says what happened.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.repository.versions import PROGRESS_NAME, VersionError

PHASES = ("observing", "promoting", "watching")


@dataclass(frozen=True)
class Progress:
    stable: int  # the stable version when the rollout began: what serves again after an interruption
    candidate: int
    phase: str
    started: float  # time.time()

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise VersionError(f"unknown rollout phase {self.phase!r} in {PROGRESS_NAME}")

    def at(self, phase: str) -> Progress:
        return Progress(self.stable, self.candidate, phase, self.started)


def write_progress(repository: Path, progress: Progress) -> None:
    """Replace the file in one rename: a reader sees the old phase or the new one."""
    staged = repository / f".{PROGRESS_NAME}.tmp-{os.getpid()}"
    staged.write_text(json.dumps(asdict(progress)) + "\n")
    staged.replace(repository / PROGRESS_NAME)


def read_progress(repository: Path) -> Progress | None:
    path = repository / PROGRESS_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return Progress(int(data["stable"]), int(data["candidate"]), str(data["phase"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VersionError(f"cannot read {path} ({type(exc).__name__}: {exc}); remove it after checking which "
                           "version serves (python -m generator check)") from exc


def clear_progress(repository: Path) -> None:
    (repository / PROGRESS_NAME).unlink(missing_ok=True)


def started(stable: int, candidate: int) -> Progress:
    return Progress(stable, candidate, "observing", time.time())
