"""Which steps of one ensemble are running right now, shared across Triton's Python-backend processes.

Only the embedded (CPU) target uses it. ONNX Runtime's spin-waiting worker threads answer a lone request
several milliseconds sooner, but under load they burn the cores the preprocess and NMS steps and the other
detector instance need. Every step holds a shared ``flock`` on one file while it executes; the detector
first asks for an exclusive lock without waiting, which it gets only when no other step is running, and
spins only then. The kernel drops the locks of a process that dies, so a crashed stub cannot leave the
pipeline marked busy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(repository: str, ensemble: str) -> Path:
    """One lock file per served ensemble (same repository and name: same file in every step's process).

    The user id is part of the name, so another user's server on the same paths cannot own the file.
    """
    digest = hashlib.sha256(f"{Path(repository).resolve()}\0{ensemble}".encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"triton-ensemble-{os.getuid()}-{digest}.lock"


class Activity:
    def __init__(self, path: str | Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Mark this step as running for the duration of the block."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextmanager
    def running_alone(self) -> Iterator[bool]:
        """Mark this step as running; yield whether no other step was running when it started."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        # Downgrade (or wait the microseconds another step's exclusive probe lasts) so others see us.
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            yield alone
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)
