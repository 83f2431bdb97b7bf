"""Map whatever tritonclient, gRPC, geventhttpclient or aiohttp raise onto our exception tree."""

from __future__ import annotations

from clients.endpoint import Endpoint
from clients.errors import ClientError, ClientTimeoutError, InferenceError, ServerUnavailableError

_UNAVAILABLE = {"StatusCode.UNAVAILABLE", "503"}
_TIMEOUT = {"StatusCode.DEADLINE_EXCEEDED", "504"}


def translate_error(exc: BaseException, endpoint: Endpoint, timeout_s: float) -> ClientError:
    """Our error for `exc`; the caller raises it `from exc` so the original stays in the chain."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, InferenceServerException):
        status = exc.status()
        message = exc.message() or str(exc)
        if status in _TIMEOUT:
            return ClientTimeoutError(f"no answer from {endpoint} within {timeout_s:g} s ({message})")
        if status in _UNAVAILABLE:
            return ServerUnavailableError(f"Triton at {endpoint} is unavailable: {message}")
        if status is None:  # raised by tritonclient itself, before or after the wire
            return ClientError(f"tritonclient: {message}")
        return InferenceError(message, status=status)
    if _is_timeout(exc):
        return ClientTimeoutError(f"no answer from {endpoint} within {timeout_s:g} s")
    if isinstance(exc, OSError) or _is_aiohttp_error(exc):
        detail = str(exc) or type(exc).__name__
        return ServerUnavailableError(f"cannot reach Triton at {endpoint}: {detail}")
    return ClientError(f"unexpected {type(exc).__name__} talking to {endpoint}: {exc}")


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):  # also socket.timeout and asyncio.TimeoutError on Python >= 3.11
        return True
    import asyncio

    if isinstance(exc, asyncio.TimeoutError):
        return True
    try:
        import gevent
    except ImportError:  # pragma: no cover - gevent comes with tritonclient[http]
        return False
    return isinstance(exc, gevent.Timeout)


def _is_aiohttp_error(exc: BaseException) -> bool:
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - aiohttp comes with tritonclient[http]
        return False
    return isinstance(exc, aiohttp.ClientError)
