"""Failure modes against real sockets (no Triton): nothing listening, and a peer that never answers."""

import asyncio
import socket
import time

import pytest

from clients import AsyncDetectionClient, DetectionClient
from clients.errors import ClientError, ClientTimeoutError, ServerUnavailableError

PROTOCOLS = ("grpc", "http")


@pytest.fixture
def closed_port():
    """A bound but not listening port: connections are refused, and nobody else can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def silent_port():
    """Accepts TCP connections (kernel backlog) and never sends a byte."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


def detect_sync(port, protocol, timeout_s=0.5):
    with DetectionClient(f"127.0.0.1:{port}", protocol=protocol, timeout_s=timeout_s) as client:
        client.detect(b"abc")


def detect_async(port, protocol, timeout_s=0.5):
    async def run():
        async with AsyncDetectionClient(
            f"127.0.0.1:{port}", protocol=protocol, timeout_s=timeout_s
        ) as client:
            await client.detect(b"abc")

    asyncio.run(run())


@pytest.mark.parametrize("detect", [detect_sync, detect_async], ids=["sync", "async"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_refused_connection_is_server_unavailable(detect, protocol, closed_port):
    with pytest.raises(ServerUnavailableError, match=f"{protocol}://127.0.0.1:{closed_port}"):
        detect(closed_port, protocol)


@pytest.mark.parametrize("detect", [detect_sync, detect_async], ids=["sync", "async"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_silent_server_times_out_on_time(detect, protocol, silent_port):
    start = time.monotonic()
    with pytest.raises(ClientTimeoutError, match=r"within 0\.5 s"):
        detect(silent_port, protocol)
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wait_until_ready_gives_up(protocol, closed_port):
    with DetectionClient(f"127.0.0.1:{closed_port}", protocol=protocol, timeout_s=0.5) as client:
        start = time.monotonic()
        with pytest.raises(ServerUnavailableError, match=r"not ready after 0\.6 s"):
            client.wait_until_ready(0.6, poll_s=0.1)
        assert 0.5 < time.monotonic() - start < 3.0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_wait_until_ready_gives_up(protocol, silent_port):
    async def run():
        async with AsyncDetectionClient(
            f"127.0.0.1:{silent_port}", protocol=protocol, timeout_s=0.3
        ) as client:
            await client.wait_until_ready(0.6, poll_s=0.1)

    with pytest.raises(ServerUnavailableError, match=r"not ready after 0\.6 s"):
        asyncio.run(run())


def test_no_request_for_empty_input(closed_port):
    # An empty list needs no server: nothing is sent, so nothing can fail.
    with DetectionClient(f"127.0.0.1:{closed_port}") as client:
        assert client.detect_many([]) == []


@pytest.mark.parametrize("timeout_s", [0, -1.0, float("nan"), float("inf")])
def test_non_positive_timeout_rejected(timeout_s):
    with pytest.raises(ClientError, match="timeout_s"):
        DetectionClient("127.0.0.1:1", timeout_s=timeout_s)
    with pytest.raises(ClientError, match="timeout_s"):
        AsyncDetectionClient("127.0.0.1:1", timeout_s=timeout_s)


def test_missing_image_fails_before_any_request(tmp_path, closed_port):
    with (
        DetectionClient(f"127.0.0.1:{closed_port}") as client,
        pytest.raises(ClientError, match="cannot read image"),
    ):
        client.detect(tmp_path / "missing.jpg")
