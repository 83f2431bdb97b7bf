"""The admin APIs every server of this project restricts, and the key that opens them.

One list, used by ``python -m generator serve`` and by the deploy files (``deploy/settings.py`` imports it),
so the server a developer runs here refuses what production refuses. Health, metadata and inference stay
open: probes, clients and load tests use nothing else. Triton's syntax is
``--http-restricted-api=<groups>:<header>=<value>`` and ``--grpc-restricted-protocol=...``; HTTP clients send
``<header>: <value>``, gRPC clients the metadata ``triton-grpc-protocol-<header>: <value>``
(server: src/restricted_features.h, both flags exist since Triton 2.40).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from generator.errors import ServerError
from generator.serving.contract import ADMIN_HEADER, ADMIN_TOKEN_ENV

ADMIN_API_GROUPS = ("model-repository", "model-config", "shared-memory", "statistics", "trace", "logging")

# Characters that survive Triton's "groups:key=value" flag parsing and an HTTP header unchanged.
_TOKEN_RE = re.compile(r"^[A-Za-z0-9._~-]{16,256}$")


def check_token(token: str) -> str:
    """The token itself, or ServerError saying what a usable one looks like."""
    if not _TOKEN_RE.match(token):
        raise ServerError(
            f"{ADMIN_TOKEN_ENV} must be 16-256 characters of A-Z a-z 0-9 . _ ~ - "
            "(e.g. `openssl rand -hex 32`); got one that is not"
        )
    return token


@dataclass(frozen=True)
class AdminAccess:
    """The restricted groups and the key that opens them on both protocols."""

    token: str
    generated: bool = False  # made up by this process (print it), rather than given by the operator
    header: str = ADMIN_HEADER
    groups: tuple[str, ...] = ADMIN_API_GROUPS

    def server_args(self) -> list[str]:
        """tritonserver flags restricting the groups on HTTP and gRPC."""
        restriction = f"{','.join(self.groups)}:{self.header}={self.token}"
        return [f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"]


def admin_access(environ: Mapping[str, str] | None = None) -> AdminAccess:
    """The operator's key from TRITON_ADMIN_TOKEN, or a fresh random one."""
    value = (os.environ if environ is None else environ).get(ADMIN_TOKEN_ENV, "").strip()
    if value:
        return AdminAccess(check_token(value))
    return AdminAccess(secrets.token_hex(32), generated=True)
