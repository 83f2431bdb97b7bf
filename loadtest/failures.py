"""What a Locust user does with a request that failed: name the cause, and back off when nothing was reached or
the server refused it under overload (back-pressure, counted apart from errors).

Kept apart from users.py, which imports Locust (and with it gevent's monkey-patching), so it is tested alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from clients import QUEUE_TIMEOUT, busy_error, connection_failure

from .errors import InferenceFailed


@dataclass
class Backoff:
    """How long a user waits after a request that never reached a server (no TLS session, nothing listening, no
    such host): those do not heal at request speed, so the user backs off, doubling from ``first_s`` to
    ``max_s`` with jitter, instead of failing thousands of times a second (which also took a worker down). A
    request the server answered, even with an error, resets it."""

    first_s: float = 0.1
    max_s: float = 5.0
    current_s: float = 0.0

    def failed(self) -> float:
        self.current_s = min(self.max_s, 2 * self.current_s) if self.current_s else self.first_s
        return random.uniform(self.current_s / 2, self.current_s)

    def reached(self) -> None:
        self.current_s = 0.0


def named_failure(exc: BaseException, address: str) -> tuple[BaseException, bool]:
    """The failure as Locust reports it, and whether no connection was made: the cause by name (TLS name or CA,
    protocol, refused, unresolved; one stable text per cause, so Locust counts them in one row), never empty."""
    text = f"{exc!r} {exc}"
    failure = connection_failure(text, address)
    if failure is not None:
        return InferenceFailed(failure[1]), True
    if not str(exc).strip():
        status = getattr(exc, "status", None)
        code = status() if callable(status) else status
        return InferenceFailed(f"{type(exc).__name__} without a message (status {code})"), False
    if str(exc) not in repr(exc):
        # Locust's failure table keys on repr(); tritonclient.grpc builds its errors from keywords, whose repr
        # is a bare "InferenceServerException()": every gRPC failure, whatever its cause, showed in one row.
        return InferenceFailed(str(exc)), False
    return exc, False


# Refusals under overload, one stable text per cause, so Locust counts each in one row and the report tells them
# from errors by this prefix (users.py quitting_report).
REFUSED_PREFIX = "refused under overload: "
BUSY_PAUSE_S = 0.5  # without a Retry-After (a full Triton queue, a queue budget waited out)
BUSY_MAX_S = 5.0


def refusal(exc: BaseException) -> tuple[InferenceFailed, float] | None:
    """For a request the server refused under overload (the proxy's in-flight limit, a full Triton queue, a step's
    queue budget waited out): the failure as Locust reports it and how long the user backs off (the Retry-After
    named, bounded); else None."""
    status, message = getattr(exc, "status", None), getattr(exc, "message", None)
    code = status() if callable(status) else status
    text = message() if callable(message) else str(exc)
    busy = busy_error(None if code is None else str(code), str(text or ""))
    if busy is None:
        return None
    cause = ("the proxy's in-flight limit" if busy.retry_after_s is not None
             else "Triton's queue budget" if QUEUE_TIMEOUT in str(text) else "a full Triton queue")
    pause = min(BUSY_MAX_S, busy.retry_after_s if busy.retry_after_s is not None else BUSY_PAUSE_S)
    return InferenceFailed(REFUSED_PREFIX + cause), random.uniform(pause, 1.2 * pause)
