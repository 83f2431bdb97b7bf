"""Turn a user-facing URL (`grpc://h:p`, `https://h:p`, bare `h:p`) into what tritonclient wants."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from clients.errors import ClientError

Protocol = Literal["grpc", "http"]

_SCHEMES: dict[str, tuple[Protocol, bool]] = {
    "grpc": ("grpc", False),
    "grpcs": ("grpc", True),
    "http": ("http", False),
    "https": ("http", True),
}
DEFAULT_PORTS: dict[Protocol, int] = {"grpc": 8001, "http": 8000}


@dataclass(frozen=True)
class Endpoint:
    """Where and how to talk to Triton. `address` is `host:port[/path]` without a scheme (tritonclient rejects one)."""

    protocol: Protocol
    address: str
    ssl: bool = False

    def __str__(self) -> str:
        return f"{self.protocol}{'s' if self.ssl else ''}://{self.address}"


def parse_endpoint(url: str, protocol: str | None = None) -> Endpoint:
    """Pick the protocol from the URL scheme, else from `protocol`, else gRPC.

    A scheme and an explicit `protocol` that disagree are a user error, not something to guess about.
    A missing port gets Triton's default for the protocol (8001 gRPC, 8000 HTTP).
    """
    if protocol is not None and protocol not in DEFAULT_PORTS:
        raise ClientError(f"unknown protocol {protocol!r}: use 'grpc' or 'http'")
    text = url.strip()
    if not text:
        raise ClientError("empty server URL: give host:port, e.g. 127.0.0.1:8001 or http://127.0.0.1:8000")
    chosen: Protocol = "grpc" if protocol is None else protocol
    ssl = False
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() not in _SCHEMES:
            raise ClientError(
                f"unsupported URL scheme {scheme!r} in {url!r}: use grpc://, grpcs://, http:// or https://"
            )
        from_scheme, ssl = _SCHEMES[scheme.lower()]
        if protocol is not None and protocol != from_scheme:
            raise ClientError(f"URL {url!r} says {from_scheme} but protocol={protocol!r} was requested")
        chosen = from_scheme
    host, sep, rest = text.partition("/")
    if not host:
        raise ClientError(f"no host in server URL {url!r}")
    if chosen == "grpc" and rest:
        raise ClientError(f"gRPC URL {url!r} cannot carry a path")
    host = _with_port(host, chosen, url)
    return Endpoint(
        protocol=chosen, address=host + (sep + rest.rstrip("/") if rest.strip("/") else ""), ssl=ssl
    )


def _with_port(host: str, protocol: Protocol, url: str) -> str:
    if host.startswith("["):  # IPv6 literal: [::1] or [::1]:8001
        end = host.find("]")
        if end < 0:
            raise ClientError(f"unterminated IPv6 address in {url!r}")
        port = host[end + 1 :].removeprefix(":")
        host_part = host[: end + 1]
    else:
        host_part, _, port = host.partition(":")
        if ":" in port:
            raise ClientError(f"cannot parse host:port from {url!r} (wrap IPv6 addresses in [brackets])")
    if host_part in ("", "[]"):
        raise ClientError(f"no host in server URL {url!r}")
    if not port:
        return f"{host_part}:{DEFAULT_PORTS[protocol]}"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ClientError(f"invalid port {port!r} in server URL {url!r}")
    return f"{host_part}:{port}"


def tls_options(url: str, protocol: str | None, ca_cert: Path | None) -> dict[str, Any]:
    """tritonclient's asyncio options that trust ``ca_cert`` (``--ca-cert``) for a grpcs:// or https:// URL."""
    if ca_cert is None:
        return {}
    endpoint = parse_endpoint(url, protocol)
    if not endpoint.ssl:
        raise ClientError("--ca-cert needs a grpcs:// or https:// URL")
    try:
        pem = ca_cert.read_bytes()
    except OSError as exc:
        raise ClientError(f"cannot read --ca-cert {str(ca_cert)!r}: {exc.strerror or exc}") from None
    if endpoint.protocol == "grpc":
        return {"root_certificates": str(ca_cert)}  # tritonclient's gRPC client reads the file itself
    import ssl

    return {"ssl_context": ssl.create_default_context(cadata=pem.decode("ascii", "replace"))}
