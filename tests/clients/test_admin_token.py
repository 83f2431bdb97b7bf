"""One word for the admin secret on every command line: --admin-token; the old --admin-key spellings warn."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clients import admin_token
from clients.errors import ClientError
from generator.operate.rollout.arguments import add_connection_arguments, control_from_args


def parser(**kwargs: bool) -> argparse.ArgumentParser:
    made = argparse.ArgumentParser()
    admin_token.add_arguments(made, "for the test", **kwargs)
    return made


def test_flag_then_file_then_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_ADMIN_TOKEN", "from-env")
    secret = tmp_path / "admin-token"
    secret.write_text("from-file\n")
    assert admin_token.token_from(parser().parse_args(["--admin-token", "flag"])) == "flag"
    assert admin_token.token_from(parser().parse_args(["--admin-token-file", str(secret)])) == "from-file"
    assert admin_token.token_from(parser().parse_args([])) == "from-env"
    assert admin_token.token_from(parser(env_default=False).parse_args([])) is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ClientError, match=r"^the admin token file .*empty is empty$"):
        admin_token.token_from(parser().parse_args(["--admin-token-file", str(tmp_path / "empty")]))


def test_the_old_spellings_still_work_and_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["--admin-key", "old"])
    assert admin_token.token_from(args) == "old"
    assert capsys.readouterr().err == "warning: --admin-key is renamed --admin-token (the old name will go)\n"
    parser().parse_args(["--admin-token", "new"])
    assert capsys.readouterr().err == ""


def test_the_rollout_reads_the_same_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rollout = argparse.ArgumentParser()
    add_connection_arguments(rollout)
    secret = tmp_path / "admin_token"
    secret.write_text("rollout-token\n")
    args = rollout.parse_args(["--model-repository", str(tmp_path), "--admin-key-file", str(secret)])
    assert control_from_args(args).admin_key == "rollout-token"
    assert "--admin-key-file is renamed --admin-token-file" in capsys.readouterr().err
