"""The restricted admin API groups and the key; against a real server: tests/integration/test_serve.py."""

from __future__ import annotations

import pytest

from generator.errors import ServerError
from generator.server import hardening
from generator.server.hardening import ADMIN_API_GROUPS, AdminAccess, admin_access, check_token

TOKEN = "0123456789abcdef0123456789abcdef"


def test_deploy_restricts_the_same_list() -> None:
    from deploy import settings

    assert settings.ADMIN_API_GROUPS is hardening.ADMIN_API_GROUPS
    assert settings.Settings().restricted_api_groups == ADMIN_API_GROUPS


def test_what_stays_open() -> None:
    """Probes, clients and load tests use health, metadata and inference only."""
    assert not {"health", "metadata", "inference"} & set(ADMIN_API_GROUPS)


def test_server_args_restrict_both_protocols() -> None:
    restriction = f"{','.join(ADMIN_API_GROUPS)}:admin-key={TOKEN}"
    assert AdminAccess(TOKEN).server_args() == [
        f"--http-restricted-api={restriction}", f"--grpc-restricted-protocol={restriction}"
    ]


def test_key_from_the_environment() -> None:
    access = admin_access({"TRITON_ADMIN_TOKEN": f"  {TOKEN}\n"})
    assert access.token == TOKEN and not access.generated


def test_generated_key_is_fresh_and_usable() -> None:
    first, second = admin_access({}), admin_access({"TRITON_ADMIN_TOKEN": ""})
    assert first.generated and second.generated and first.token != second.token
    assert check_token(first.token) == first.token and len(first.token) == 64


@pytest.mark.parametrize("token", ["short", "has:colon" * 4, "has=equals" * 4, "has,comma" * 4, "sp ace" * 8])
def test_unusable_keys_are_refused(token: str) -> None:
    with pytest.raises(ServerError, match="TRITON_ADMIN_TOKEN must be 16-256 characters"):
        admin_access({"TRITON_ADMIN_TOKEN": token})
