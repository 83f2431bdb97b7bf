"""Map whatever tritonclient, gRPC, geventhttpclient or aiohttp raise onto our exception tree."""

from __future__ import annotations

import http.client
import re

from clients.endpoint import Endpoint
from clients.errors import (
    ClientError,
    ClientTimeoutError,
    InferenceError,
    RestrictedApiError,
    ServerBusyError,
    ServerUnavailableError,
    TlsError,
)

_UNAVAILABLE = {"StatusCode.UNAVAILABLE", "503"}
# Refused under overload before any work: the proxy's in-flight limit (429 / RESOURCE_EXHAUSTED; its message ends
# "retry after N s", the HTTP answer's Retry-After, which tritonclient does not hand over), a full Triton queue, or
# a request that waited its step's queue budget out (the build's default_queue_policy: the same overload, shed later).
_BUSY = {"StatusCode.RESOURCE_EXHAUSTED", "429"}
QUEUE_FULL = "Exceeds maximum queue size"
QUEUE_TIMEOUT = "Request timeout expired"
_RETRY_AFTER = re.compile(r"retry after (\d+(?:\.\d+)?) s")
_TIMEOUT = {"StatusCode.DEADLINE_EXCEEDED", "504"}
# Triton's answers to a restricted API without the key: HTTP 403 "This API is restricted, expecting header
# '<key>'", gRPC UNAVAILABLE "This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'".
# The gRPC one must not be read as a retryable UNAVAILABLE.
# A model known to the server without a loaded version: loading, or unloading while the server stops
# (seen as NOT_FOUND on gRPC during a drain). Another attempt, elsewhere or later, can succeed.
_NO_VERSION = "has no available versions"
_RESTRICTED = {("403", "This API is restricted"), ("StatusCode.UNAVAILABLE", "This protocol is restricted")}


# Why a connection never carried a request, as gRPC (BoringSSL, its resolver) and Python's ssl/socket word it.
# The first match names the cause; TLS causes do not heal by retrying.
_CONNECTION_FAILURES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("tls", ("Hostname Verification Check failed", "Peer name", "Hostname mismatch", "is not valid for",
             "doesn't match"),
     "TLS: the server's certificate does not name {host}, the host dialled (dial a name it carries, or "
     "reissue the certificate for {host})"),
    ("tls", ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed"),
     "TLS: the server's certificate is not signed by a CA this client trusts (pass the CA that signed it: "
     "--ca-cert, ca_cert=)"),
    ("tls", ("Trying to connect an http1.x server",),
     "TLS: the server at {address} speaks TLS (use grpcs:// or https://)"),
    ("tls", ("WRONG_VERSION_NUMBER", "wrong version number", "packet length too long"),
     "TLS: the server at {address} does not speak TLS (use grpc:// or http://)"),
    ("refused", ("Connection refused", "Errno 111"), "connection refused: nothing listens at {address}"),
    ("dns", ("DNS resolution failed", "Name or service not known", "nodename nor servname", "Errno -2",
             "Errno -3"), "cannot resolve {host}"),
)


def connection_failure(text: str, address: str) -> tuple[str, str] | None:
    """(kind, cause) when ``text`` says no connection to ``address`` (``host:port``) was made, else None.

    kind is ``tls`` (a certificate or protocol mismatch: retrying cannot help), ``refused`` or ``dns``.
    """
    host = address.split("/", 1)[0].rpartition(":")[0].strip("[]") or address
    for kind, markers, cause in _CONNECTION_FAILURES:
        if any(marker in text for marker in markers):
            return kind, cause.format(host=host, address=address)
    return None


def translate_error(exc: BaseException, endpoint: Endpoint, timeout_s: float) -> ClientError:
    """Our error for `exc`; the caller raises it `from exc` so the original stays in the chain."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, ClientError):
        return exc
    failure = connection_failure(f"{exc!r} {exc}", endpoint.address)
    if failure is not None and failure[0] == "tls":
        return TlsError(f"cannot talk to {endpoint}: {failure[1]}")
    if isinstance(exc, InferenceServerException):
        if failure is not None:
            return ServerUnavailableError(f"cannot reach Triton at {endpoint}: {failure[1]}")
        return _from_triton(exc.status(), exc.message() or str(exc), endpoint, timeout_s)
    if _is_timeout(exc):
        return ClientTimeoutError(f"no answer from {endpoint} within {timeout_s:.3g} s")
    if isinstance(exc, (OSError, http.client.HTTPException)) or _is_aiohttp_error(exc):
        # HTTPException: geventhttpclient's "connection closed" when a server goes away mid-request.
        detail = str(exc) or type(exc).__name__
        return ServerUnavailableError(f"cannot reach Triton at {endpoint}: {detail}")
    if type(exc).__module__ == "greenlet":  # a gevent-based HTTP client used from a thread other than its own
        return ClientError(f"{exc} ({endpoint}): the HTTP client is gevent-based; use one client per thread")
    return ClientError(f"unexpected {type(exc).__name__} talking to {endpoint}: {exc}")


def _from_triton(status: str | None, message: str, endpoint: Endpoint, timeout_s: float) -> ClientError:
    if any(status == code and text in message for code, text in _RESTRICTED):
        return RestrictedApiError(
            f"Triton at {endpoint} restricts this API to its admin key ({message}); pass admin_key= "
            "(python -m generator serve prints it; deployments keep it in TRITON_ADMIN_TOKEN)"
        )
    busy = busy_error(status, message, f"Triton at {endpoint}")
    if busy is not None:
        return busy
    if status in _TIMEOUT:
        return ClientTimeoutError(f"no answer from {endpoint} within {timeout_s:.3g} s ({message})")
    if status in _UNAVAILABLE or _NO_VERSION in message:
        return ServerUnavailableError(f"Triton at {endpoint} is unavailable: {message}")
    if status is None:  # raised by tritonclient itself, before or after the wire
        return ClientError(f"tritonclient: {message}")
    return InferenceError(message, status=status)


def busy_error(status: str | None, message: str, server: str = "the server") -> ServerBusyError | None:
    """The refusal under overload that ``status`` and ``message`` describe (with the time it names), or None."""
    if not (status in _BUSY or (status in _UNAVAILABLE and (QUEUE_FULL in message or QUEUE_TIMEOUT in message))):
        return None
    after = _RETRY_AFTER.search(message)
    return ServerBusyError(f"{server} is busy: {message}", float(after[1]) if after else None)


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
