"""One exception tree for the clients package, so callers catch `ClientError` and nothing else."""

from __future__ import annotations


class ClientError(Exception):
    """Base class of every error the detection clients raise."""


class ServerUnavailableError(ClientError):
    """The server could not be reached, or it is up but not ready/overloaded (worth retrying later)."""


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
