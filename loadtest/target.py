"""Where the server is: ``HOST:PORT`` (optionally with a scheme) to the address tritonclient expects.

Kept here rather than borrowed from ``clients`` so Locust workers need only this package and tritonclient.
"""

from __future__ import annotations

from .errors import LoadTestError

DEFAULT_PORTS = {"grpc": 8001, "http": 8000}
DEFAULT_METRICS_PORT = 8002
# TLS schemes (the deploy's proxy in front of Triton) and the protocol each speaks.
TLS_SCHEMES = {"grpcs": "grpc", "https": "http"}


def uses_tls(url: str) -> bool:
    """``grpcs://`` and ``https://`` URLs reach Triton through a TLS proxy."""
    return url.strip().partition("://")[0].lower() in TLS_SCHEMES if "://" in url else False


def address_of(url: str, protocol: str) -> str:
    """``grpc[s]://h:p``, ``http[s]://h:p/prefix`` or ``h:p`` -> ``h:p[/prefix]``; a missing port gets the default."""
    if protocol not in DEFAULT_PORTS:
        raise LoadTestError(f"unknown protocol {protocol!r}: use grpc or http")
    text = url.strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        scheme = TLS_SCHEMES.get(scheme.lower(), scheme.lower())
        if scheme not in ("grpc", "http"):
            raise LoadTestError(f"unsupported scheme {scheme!r} in {url!r}: use grpc[s]:// or http[s]://")
        if scheme != protocol:
            raise LoadTestError(f"URL {url!r} says {scheme} but the protocol is {protocol}")
    host_port, sep, path = text.partition("/")
    host, port = split_host_port(host_port, DEFAULT_PORTS[protocol], url)
    if path.strip("/") and protocol == "grpc":
        raise LoadTestError(f"gRPC URL {url!r} cannot carry a path")
    return f"{host}:{port}" + (sep + path.strip("/") if path.strip("/") else "")


def split_host_port(text: str, default_port: int, url: str = "") -> tuple[str, int]:
    """``h:p``, ``[::1]:p`` or ``h`` -> (host, port)."""
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[: end + 1], text[end + 1 :]
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.partition(":")
    if not host or host == "[]" or ":" in port_text:
        raise LoadTestError(f"cannot read HOST:PORT from {url or text!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise LoadTestError(f"invalid port {port_text!r} in {url or text!r}")
    return host, int(port_text)


def default_metrics_url(url: str, protocol: str) -> str:
    """Triton's metrics live on the same host, port 8002 unless told otherwise."""
    host, _ = split_host_port(address_of(url, protocol).split("/", 1)[0], DEFAULT_PORTS[protocol], url)
    return f"{host}:{DEFAULT_METRICS_PORT}"
