from __future__ import annotations

import pytest

from loadtest.errors import LoadTestError
from loadtest.target import address_of, default_metrics_url, uses_tls


@pytest.mark.parametrize(
    ("url", "protocol", "expected"),
    [
        ("127.0.0.1:8001", "grpc", "127.0.0.1:8001"),
        ("grpc://triton:9001", "grpc", "triton:9001"),
        ("localhost", "http", "localhost:8000"),
        ("http://h:80/triton/", "http", "h:80/triton"),
        ("[::1]:8001", "grpc", "[::1]:8001"),
        ("[::1]", "grpc", "[::1]:8001"),
        ("grpcs://triton:8444", "grpc", "triton:8444"),
        ("https://h:8443", "http", "h:8443"),
    ],
)
def test_addresses(url, protocol, expected):
    assert address_of(url, protocol) == expected


@pytest.mark.parametrize(
    ("url", "protocol", "message"),
    [
        ("http://h:1", "grpc", "says http"),
        ("grpc://h:1/x", "grpc", "cannot carry a path"),
        ("h:99999", "grpc", "invalid port"),
        ("h:abc", "http", "invalid port"),
        ("ftp://h:1", "http", "unsupported scheme"),
        ("https://h:1", "grpc", "says http"),
        (":8001", "grpc", "HOST:PORT"),
    ],
)
def test_bad_addresses(url, protocol, message):
    with pytest.raises(LoadTestError, match=message):
        address_of(url, protocol)


def test_metrics_default_to_port_8002_on_the_same_host():
    assert default_metrics_url("grpc://10.1.2.3:8001", "grpc") == "10.1.2.3:8002"
    assert default_metrics_url("[::1]:8000", "http") == "[::1]:8002"


def test_tls_schemes_are_the_proxy_ones():
    assert uses_tls("grpcs://h:8444") and uses_tls("HTTPS://h:8443")
    assert not uses_tls("grpc://h:8001") and not uses_tls("h:8001")
