"""One exception tree for the clients package, so callers catch `ClientError` and nothing else."""

from __future__ import annotations


class ClientError(Exception):
    """Base class of every error the detection clients raise."""


class ServerUnavailableError(ClientError):
    """The server could not be reached, is restarting or draining, or shed the request under overload.

    The only error the clients retry (`clients.retry.RetryPolicy`); it reaches the caller once the retries
    or the deadline are used up.
    """


class ServerBusyError(ServerUnavailableError):
    """The server refused the request under overload, before working on it: back-pressure, not a fault.

    The deployed proxy's in-flight limit (HTTP 429 with ``Retry-After``, gRPC RESOURCE_EXHAUSTED), a full Triton
    queue (503 / UNAVAILABLE "Exceeds maximum queue size"), or a request that waited a step's queue budget out
    unserved (503 / UNAVAILABLE "Request timeout expired"). Retried like any `ServerUnavailableError`, but not
    before ``retry_after_s`` when the server named one; callers that count outcomes count it apart from errors.
    """

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TlsError(ClientError):
    """No TLS connection: the server's certificate is not signed by a CA the client trusts, does not name the
    host the client dialled, or one side does not speak TLS. The message says which; never retried.
    """


class RestrictedApiError(ClientError):
    """The server restricts this API (an admin group such as model-config) and the call had no valid key.

    Never retried: the same call fails the same way until the admin token is given.
    """


class InferenceError(ClientError):
    """The server answered and refused the request (bad image, unknown model...).

    The message is Triton's own text; `status` is its code (an HTTP status or a gRPC status name).
    """

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClientTimeoutError(ClientError):
    """No answer within the client-side timeout."""


class ImageSourceError(ClientError):
    """An image given as a path could not be read on the client side."""
