import pytest

from clients.endpoint import Endpoint, parse_endpoint
from clients.errors import ClientError


@pytest.mark.parametrize(
    ("url", "protocol", "expected"),
    [
        ("127.0.0.1:8001", None, Endpoint("grpc", "127.0.0.1:8001")),
        ("localhost", None, Endpoint("grpc", "localhost:8001")),
        ("localhost", "http", Endpoint("http", "localhost:8000")),
        ("host:9000", "http", Endpoint("http", "host:9000")),
        ("grpc://host:1234", None, Endpoint("grpc", "host:1234")),
        ("GRPC://host:1234", "grpc", Endpoint("grpc", "host:1234")),
        ("grpcs://host", None, Endpoint("grpc", "host:8001", ssl=True)),
        ("http://host:18000", None, Endpoint("http", "host:18000")),
        ("https://triton.example.com", None, Endpoint("http", "triton.example.com:8000", ssl=True)),
        ("https://gw.example.com:443/triton/", None, Endpoint("http", "gw.example.com:443/triton", ssl=True)),
        ("http://[::1]:8000", None, Endpoint("http", "[::1]:8000")),
        ("[::1]", None, Endpoint("grpc", "[::1]:8001")),
        ("  127.0.0.1:8001 ", None, Endpoint("grpc", "127.0.0.1:8001")),
    ],
)
def test_parse_endpoint(url, protocol, expected):
    assert parse_endpoint(url, protocol) == expected


@pytest.mark.parametrize(
    ("url", "protocol", "fragment"),
    [
        ("http://host:8000", "grpc", "says http"),
        ("grpc://host:8001", "http", "says grpc"),
        ("ftp://host:21", None, "unsupported URL scheme"),
        ("host:8001", "websocket", "unknown protocol"),
        ("", None, "empty server URL"),
        ("host:port", None, "invalid port"),
        ("host:70000", None, "invalid port"),
        ("host:0", None, "invalid port"),
        ("::1:8001", None, "IPv6"),
        ("[::1:8001", None, "unterminated"),
        ("grpc://host:8001/path", None, "cannot carry a path"),
        ("http://:8000", None, "no host"),
        ("http:///x", None, "no host"),
    ],
)
def test_parse_endpoint_rejects(url, protocol, fragment):
    with pytest.raises(ClientError, match=fragment):
        parse_endpoint(url, protocol)


def test_endpoint_str_round_trips():
    for url in ("grpc://h:1", "grpcs://h:2", "http://h:3", "https://h:4/p"):
        assert str(parse_endpoint(url)) == url
        assert parse_endpoint(str(parse_endpoint(url))) == parse_endpoint(url)
