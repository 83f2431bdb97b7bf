"""TCP_NODELAY for geventhttpclient, the transport of tritonclient.http (and of the Locust HTTP user).

Over TLS a request body leaves as several records, each its own write; with Nagle's algorithm the last,
small one waits for the peer's delayed ACK: +40 ms per request through the deploy's TLS proxy (measured,
deploy/README.md). gRPC and aiohttp (the async client) set TCP_NODELAY themselves; geventhttpclient does
not and has no option for it, so its connection pool's socket factory gets it.
"""

from __future__ import annotations

import socket
from typing import Any


def disable_nagle(http_client: Any) -> None:
    """Set TCP_NODELAY on every connection ``http_client`` (a geventhttpclient.HTTPClient) opens from now on."""
    pool = getattr(http_client, "_connection_pool", None)
    create = getattr(pool, "_create_tcp_socket", None)
    if create is None:
        return

    def create_without_nagle(*args: Any) -> Any:
        sock = create(*args)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    pool._create_tcp_socket = create_without_nagle  # type: ignore[union-attr]
