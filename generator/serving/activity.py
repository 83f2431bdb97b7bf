"""Whether another instance of the detector step is running: a ``flock`` shared by the step's processes.

``--detector-spin alone`` gives each embedded detector instance two sessions, one whose workers spin while a run
lasts and one whose workers sleep. A run that finds no other instance running takes the spinning one (a lone
request: the workers answer between operators at once); any other run the sleeping one, so that two instances
never spin on the same cores at once (issue 35: spinning only while a run lasts won one stream on 4 quiet cores
and lost half the throughput at 4 streams, both instances spinning). Every instance holds a shared lock while it
runs; a run first asks for the exclusive lock without waiting, which it gets only when no other instance holds
one. The kernel drops the locks of a process that dies, so a crashed stub cannot leave the step marked busy.
The project had the same lock across all steps until a6adb61 (docs/PERFORMANCE.md, "Removing the embedded
detector's alone session").
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(model_directory: str) -> Path:
    """One lock file per served model directory (every instance of one model reads the same one).

    The user id is part of the name, so another user's server on the same paths cannot own the file.
    """
    digest = hashlib.sha256(str(Path(model_directory).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"triton-detector-{os.getuid()}-{digest}.lock"


class Activity:
    """This instance's handle on the step's lock (one open file: ``flock`` locks belong to it)."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise RuntimeError(f"--detector-spin alone keeps the lock its instances share in {path}, which could "
                               f"not be opened ({exc}): give the server a writable temporary directory (TMPDIR) "
                               "or build without the option") from exc

    @contextmanager
    def running_alone(self) -> Iterator[bool]:
        """Mark this instance as running for the block; yield whether no other one was running when it began."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        # Downgrade (or wait the microseconds another instance's exclusive probe lasts) so that others see this one.
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            yield alone
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)
