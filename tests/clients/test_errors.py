import asyncio

import pytest
from tritonclient.utils import InferenceServerException

from clients._errors_map import translate_error
from clients.endpoint import parse_endpoint
from clients.errors import (
    ClientError,
    ClientTimeoutError,
    ImageSourceError,
    InferenceError,
    RestrictedApiError,
    ServerUnavailableError,
)
from clients.sync_client import locate

GRPC = parse_endpoint("grpc://h:1")


def test_one_tree():
    for cls in (ServerUnavailableError, InferenceError, ClientTimeoutError, ImageSourceError, RestrictedApiError):
        assert issubclass(cls, ClientError)
    assert not issubclass(RestrictedApiError, ServerUnavailableError)  # it must never be retried


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("StatusCode.UNAVAILABLE", "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"),
        ("403", "This API is restricted, expecting header 'admin-key'"),
    ],
)
def test_restricted_apis_are_named_as_such(status, message):
    """Measured on Triton 2.51; gRPC's status is UNAVAILABLE, which alone would read as "retry later"."""
    error = translate_error(InferenceServerException(message, status), GRPC, 2.0)
    assert type(error) is RestrictedApiError
    assert message in str(error) and "admin_key=" in str(error)


@pytest.mark.parametrize("status", ["StatusCode.NOT_FOUND", "400"])
def test_a_model_without_a_loaded_version_is_unavailable(status):
    """What a request meets while the server unloads its models on the way out (measured on 2.51)."""
    message = "Request for unknown model: 'yolo' has no available versions"
    assert type(translate_error(InferenceServerException(message, status), GRPC, 2.0)) is ServerUnavailableError
    unknown = InferenceServerException("Request for unknown model: 'nope' is not found", status)
    assert type(translate_error(unknown, GRPC, 2.0)) is InferenceError


def test_connection_closed_mid_request_is_unavailable():
    from geventhttpclient.response import HTTPConnectionClosed

    error = translate_error(HTTPConnectionClosed("connection closed."), GRPC, 2.0)
    assert type(error) is ServerUnavailableError and "connection closed" in str(error)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("StatusCode.DEADLINE_EXCEEDED", ClientTimeoutError),
        ("StatusCode.UNAVAILABLE", ServerUnavailableError),
        ("503", ServerUnavailableError),
        ("StatusCode.INVALID_ARGUMENT", InferenceError),
        ("StatusCode.NOT_FOUND", InferenceError),
        ("400", InferenceError),
        (None, ClientError),
    ],
)
def test_triton_statuses(status, expected):
    error = translate_error(
        InferenceServerException("in ensemble 'yolo', invalid image: x", status), GRPC, 2.0
    )
    assert type(error) is expected
    assert "in ensemble 'yolo', invalid image: x" in str(error)


def test_inference_error_keeps_triton_text_and_status():
    error = translate_error(InferenceServerException("bad image", "400"), GRPC, 2.0)
    assert isinstance(error, InferenceError)
    assert str(error) == "bad image"
    assert error.status == "400"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError("timed out"), ClientTimeoutError),
        (asyncio.TimeoutError(), ClientTimeoutError),
        (ConnectionRefusedError(111, "Connection refused"), ServerUnavailableError),
        (ConnectionResetError(), ServerUnavailableError),
        (ValueError("odd"), ClientError),
    ],
)
def test_transport_exceptions(exc, expected):
    error = translate_error(exc, GRPC, 2.0)
    assert type(error) is expected
    assert "grpc://h:1" in str(error)


def test_gevent_timeout_is_a_timeout():
    import gevent

    assert isinstance(translate_error(gevent.Timeout(1), GRPC, 1.0), ClientTimeoutError)


def test_our_errors_pass_through():
    original = InferenceError("x", "400")
    assert translate_error(original, GRPC, 1.0) is original


def test_locate_prefixes_only_split_calls():
    error = InferenceError("invalid image: image 1: corrupt", status="400")
    assert locate(error, range(0, 8), 1) is error
    located = locate(error, range(8, 11), 2)
    assert str(located) == "request for images 8..10: invalid image: image 1: corrupt"
    assert located.status == "400"


def test_http_client_used_across_threads_says_so():
    """What gevent raises when a sync HTTP client made in one thread blocks in another (seen in the faults suite)."""
    import greenlet

    error = translate_error(greenlet.error("Cannot switch to a different thread"), GRPC, 1.0)
    assert type(error) is ClientError and "use one client per thread" in str(error)


@pytest.mark.parametrize(
    ("status", "message", "retry_after_s"),
    [
        # The deployed proxy's in-flight limit (deploy/proxy_admission.py BUSY_MESSAGE), over gRPC and HTTP.
        ("StatusCode.RESOURCE_EXHAUSTED", "server busy: ... at the limit; retry after 1 s", 1.0),
        ("429", "server busy: ... at the limit; retry after 2 s", 2.0),
        # A full Triton queue (2.51's words): back-pressure too, with no time named.
        ("StatusCode.UNAVAILABLE", "in ensemble 'yolo', Exceeds maximum queue size", None),
        ("503", "Exceeds maximum queue size", None),
        # A request that waited a step's queue budget out (default_queue_policy REJECT): the same overload, later.
        ("StatusCode.UNAVAILABLE", "in ensemble 'yolo', Request timeout expired", None),
        ("503", "Request timeout expired", None),
    ],
)
def test_refusals_under_overload_are_back_pressure(status, message, retry_after_s):
    from clients.errors import ServerBusyError

    error = translate_error(InferenceServerException(message, status), GRPC, 2.0)
    assert type(error) is ServerBusyError and isinstance(error, ServerUnavailableError)
    assert error.retry_after_s == retry_after_s and message in str(error)


def test_a_server_going_away_is_not_busy():
    from clients.errors import ServerBusyError

    error = translate_error(InferenceServerException("Socket closed", "StatusCode.UNAVAILABLE"), GRPC, 2.0)
    assert type(error) is ServerUnavailableError and not isinstance(error, ServerBusyError)
