"""Rules for the proxy's nginx.conf: TLS on both listeners, the body limit from the build, loopback upstreams."""

from __future__ import annotations

import re

from deploy import sizing
from deploy.settings import Settings


def _directives(conf: str, name: str) -> list[str]:
    """Arguments of every ``name ...;`` directive, comments stripped."""
    text = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    return [m.strip() for m in re.findall(rf"(?:^|[;{{}}\s]){name}\s+([^;{{}}]*);", text)]


def proxy_violations(conf: str, settings: Settings, where: str = "proxy/nginx.conf") -> list[str]:
    problems = []
    limit = str(sizing.max_request_bytes(settings))
    if _directives(conf, "client_max_body_size") != [limit]:
        problems.append(f"{where}: client_max_body_size must be {limit} once (deploy/sizing.py), "
                        f"got {_directives(conf, 'client_max_body_size')}")
    listens = _directives(conf, "listen")
    want = [f"{settings.proxy_http_port} ssl", f"{settings.proxy_grpc_port} ssl http2"]
    if sorted(listens) != sorted(want):
        problems.append(f"{where}: listeners must be exactly {want} (TLS on both), got {listens}")
    upstreams = _directives(conf, "server")
    want_up = [f"127.0.0.1:{settings.http_port}", f"127.0.0.1:{settings.grpc_port}"]
    if sorted(upstreams) != sorted(want_up):
        problems.append(f"{where}: upstreams must be Triton on loopback {want_up}, got {upstreams}")
    if _directives(conf, "grpc_pass") != ["grpc://triton_grpc"] or _directives(conf, "proxy_pass") != ["http://triton_http"]:
        problems.append(f"{where}: gRPC must go through grpc_pass and HTTP through proxy_pass to the upstreams")
    protocols = " ".join(_directives(conf, "ssl_protocols")).split()
    if not protocols or set(protocols) - {"TLSv1.2", "TLSv1.3"}:
        problems.append(f"{where}: ssl_protocols must be TLSv1.2/TLSv1.3 only, got {protocols}")
    if "grpc-status 8" not in conf:
        problems.append(f"{where}: an oversized gRPC request must end with grpc-status 8 (RESOURCE_EXHAUSTED)")
    return problems
