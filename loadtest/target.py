"""Where the server is, for the load tools: ``clients.endpoint`` parses the URL, this adapts its answer.

The load tools speak plain gRPC/HTTP, except the Locust users, which also reach Triton through the deploy's TLS
proxy (``grpcs://``, ``https://``: ``user_address``); they report errors as ``LoadTestError`` (the CLI prints
one line), and find Triton's metrics on the same host as the inference port.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.endpoint import parse_endpoint
from clients.errors import ClientError

from .errors import LoadTestError

DEFAULT_METRICS_PORT = 8002


@dataclass(frozen=True)
class Endpoints:
    """One server's three ``host:port`` addresses."""

    grpc: str
    http: str
    metrics: str


def user_address(url: str, protocol: str) -> tuple[str, bool]:
    """``grpc[s]://h:p``, ``http[s]://h:p/prefix`` or ``h:p`` -> (``h:p[/prefix]``, TLS); a missing port gets the
    default."""
    try:
        endpoint = parse_endpoint(url, protocol)
    except ClientError as exc:
        raise LoadTestError(str(exc)) from None
    return endpoint.address, endpoint.ssl


def address_of(url: str, protocol: str) -> str:
    """``grpc://h:p``, ``http://h:p/prefix`` or ``h:p`` -> ``h:p[/prefix]``; a missing port gets the default."""
    address, tls = user_address(url, protocol)
    if tls:
        raise LoadTestError(f"{url!r} asks for TLS, which only the Locust users speak: use grpc:// or http://")
    return address


def host_of(address: str) -> str:
    """``h:p[/prefix]`` (as returned by ``address_of``) -> ``h``; IPv6 hosts keep their brackets."""
    return address.split("/", 1)[0].rpartition(":")[0]


def default_metrics_url(url: str, protocol: str) -> str:
    """Triton's metrics live on the same host, port 8002 unless told otherwise."""
    return f"{host_of(address_of(url, protocol))}:{DEFAULT_METRICS_PORT}"
