"""Waiting for a server this project started: ready, or gone, and then its own error line instead of a time-out.

A waiter that only polls the server's port waits out its whole budget when the server has already exited (a
port taken, a missing model) and then reports "connection refused". Every wait here also watches the process and,
when it is gone, raises with the line of the server's log that says why (``./demo.sh``, ``EmbeddedServer``).
"""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from generator.errors import ServerError

# Lines that say why a server stopped: the project's one-line user errors ("error: ..."), Triton's glog errors
# ("E1206 08:55:01.123 ..."), a Python exception's last line ("OSError: ...").
_ERROR_LINE = re.compile(r"^(error: |E\d{4} |[A-Za-z_.]*(Error|Exception): )")
_TAIL_BYTES = 64 * 1024


def error_line(log: Path | None) -> str | None:
    """The last line of ``log`` that reads as an error, else its last non-empty line; None without a log."""
    if log is None:
        return None
    try:
        with log.open("rb") as file:
            file.seek(max(0, log.stat().st_size - _TAIL_BYTES))
            lines = [line.strip() for line in file.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return None
    lines = [line for line in lines if line]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    found = errors or lines
    return found[-1] if found else None


def exited_error(what: str, log: Path | None, code: int | None = None) -> ServerError:
    """``what`` exited (with ``code``): the error to raise, with the server's own line and where its log is."""
    status = f" (exit code {code})" if code is not None else ""
    line = error_line(log)
    where = f"; log: {log}" if log is not None else " (its log is above)"
    return ServerError(f"{what} exited before it was ready{status}: {line}{where}" if line
                       else f"{what} exited before it was ready{status}{where}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no procfs: kill(0) is all there is
    return state != "Z"


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def wait_ready(urls: Sequence[str], alive: Callable[[], bool], gone: Callable[[], ServerError],
               timeout_s: float, poll_s: float = 0.25) -> None:
    """Block until every URL answers 200, in order; raise ``gone()`` as soon as ``alive()`` is false, and a
    time-out naming the URL that did not answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while True:
            if not alive():
                raise gone()
            if answers(url):
                break
            if time.monotonic() >= deadline:
                raise ServerError(f"the server was not ready after {timeout_s:.0f} s ({url} did not answer)")
            time.sleep(poll_s)


def wait_for_pid(pid: int, urls: Sequence[str], log: Path | None, timeout_s: float,
                 what: str = "the server") -> None:
    """:func:`wait_ready` for a server started by another program (``./demo.sh``), known by its process id."""
    wait_ready(urls, lambda: pid_alive(pid), lambda: exited_error(what, log), timeout_s)
