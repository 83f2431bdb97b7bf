"""The command line the embedded server gets; the server itself runs in tests/integration."""

from __future__ import annotations

from pathlib import Path

from generator.server.embedded import EmbeddedServer, ServerInstall
from generator.server.hardening import AdminAccess

INSTALL = ServerInstall(Path("/opt/triton"))
TOKEN = "0123456789abcdef0123456789abcdef"


def test_restricted_when_given_an_admin_key(tmp_path: Path) -> None:
    admin = AdminAccess(TOKEN)
    command = EmbeddedServer(tmp_path, admin=admin, exit_timeout_s=7).command(INSTALL)
    assert all(arg in command for arg in admin.server_args())
    assert "--exit-timeout-secs=7" in command


def test_open_without_one(tmp_path: Path) -> None:
    command = EmbeddedServer(tmp_path).command(INSTALL)
    assert not [a for a in command if "restricted" in a]
    assert "--exit-timeout-secs=10" in command
