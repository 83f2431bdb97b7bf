"""Trusting a server's certificate: the CA a deployment's TLS proxy is signed by, per client flavour.

tritonclient takes it three ways: gRPC (sync and asyncio) the path of a PEM file (``root_certificates``), the
gevent HTTP client an ``ssl_options`` mapping (``ca_certs``), the asyncio HTTP client an ``ssl.SSLContext``. Without
a CA the system's trust store applies, as in any TLS client.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from clients.endpoint import Endpoint
from clients.errors import ClientError


def ca_options(endpoint: Endpoint, ca_cert: str | Path | None, *, aio: bool = False) -> dict[str, Any]:
    """tritonclient options that trust ``ca_cert`` for ``endpoint`` (a ``grpcs://`` or ``https://`` URL)."""
    if ca_cert is None or str(ca_cert) == "":
        return {}
    path = Path(ca_cert)
    if not endpoint.ssl:
        raise ClientError(f"a CA certificate ({path}) is for TLS: use grpcs:// or https:// instead of {endpoint}")
    if not path.is_file():
        raise ClientError(f"CA certificate not found: {path}")
    if endpoint.protocol == "grpc":
        return {"root_certificates": str(path)}
    if aio:
        try:
            return {"ssl_context": ssl.create_default_context(cafile=str(path))}
        except (ssl.SSLError, OSError) as exc:
            raise ClientError(f"cannot read the CA certificate {path}: {exc}") from None
    return {"ssl_options": {"ca_certs": str(path)}}
