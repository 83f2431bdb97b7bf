"""The load tools read URLs through ``clients.endpoint``; these are the answers they rely on."""

from __future__ import annotations

import pytest

from loadtest.errors import LoadTestError
from loadtest.target import address_of, default_metrics_url, host_of, user_address


@pytest.mark.parametrize(
    ("url", "protocol", "expected"),
    [
        ("127.0.0.1:8001", "grpc", "127.0.0.1:8001"),
        ("grpc://triton:9001", "grpc", "triton:9001"),
        ("localhost", "http", "localhost:8000"),
        ("http://h:80/triton/", "http", "h:80/triton"),
        ("[::1]:8001", "grpc", "[::1]:8001"),
        ("[::1]", "grpc", "[::1]:8001"),
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
        ("ftp://h:1", "http", "unsupported URL scheme"),
        ("https://h:1", "http", "TLS"),
        ("grpcs://h:1", "grpc", "TLS"),
        (":8001", "grpc", "no host"),
        ("h:1", "udp", "unknown protocol"),
    ],
)
def test_bad_addresses_are_load_test_errors(url, protocol, message):
    with pytest.raises(LoadTestError, match=message):
        address_of(url, protocol)


def test_host_keeps_ipv6_brackets_and_drops_the_path():
    assert host_of("[::1]:8001") == "[::1]"
    assert host_of("h:80/triton") == "h"


def test_metrics_default_to_port_8002_on_the_same_host():
    assert default_metrics_url("grpc://10.1.2.3:8001", "grpc") == "10.1.2.3:8002"
    assert default_metrics_url("[::1]:8000", "http") == "[::1]:8002"


def test_the_locust_users_also_reach_the_tls_proxy():
    assert user_address("grpcs://triton:8444", "grpc") == ("triton:8444", True)
    assert user_address("https://h:8443", "http") == ("h:8443", True)
    assert user_address("grpc://h:8001", "grpc") == ("h:8001", False)
    with pytest.raises(LoadTestError, match="says http but"):
        user_address("https://h:1", "grpc")
