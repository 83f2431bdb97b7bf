"""deploy/local: the engine floor, the throwaway CA and secrets, the bases' settings, the run's compose variables."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from deploy.cli import main
from deploy.composefile import load_compose, parse_env
from deploy.errors import LocalStackError
from deploy.local import bases, docker_versions, platforms
from deploy.local.credentials import ensure_credentials
from deploy.local.stack import UNUSED_NGC_DIGEST, LocalStack, stack_env
from deploy.policy.compose import PINNED_ENV
from deploy.settings import Settings


@pytest.mark.parametrize(("text", "version"), [
    ("26.1.5+dfsg1", (26, 1)), ("20.10.24+dfsg1", (20, 10)), ("v2.26.1", (2, 26)), ("2.24.0-desktop.1", (2, 24)),
    ("", None), ("Cannot connect to the Docker daemon", None),
])
def test_versions_are_read_as_the_clis_print_them(text: str, version: tuple[int, int] | None) -> None:
    assert docker_versions.parse_version(text) == version


def _fake_docker(folder: Path, server: str, compose: str) -> dict[str, str]:
    """A `docker` on PATH answering `docker version` and `docker compose version` (the CLI is the boundary)."""
    script = folder / "docker"
    script.write_text(f'#!/bin/sh\nif [ "$1" = compose ]; then echo "{compose}"; else echo "{server}"; fi\n')
    script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize(("server", "compose", "message"), [
    ("20.10.24+dfsg1", "2.26.1", "Docker Engine 20.10 is older than 25.0"),
    ("24.0.7", "2.26.1", "start_interval"),
    ("26.1.5", "2.20.2", "Docker Compose 2.20 is older than 2.24"),
])
def test_an_engine_or_compose_below_the_floor_is_named_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: str, compose: str, message: str) -> None:
    for key, value in _fake_docker(tmp_path, server, compose).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(docker_versions.EngineError, match=message):
        docker_versions.check_engine()


def test_engine_26_and_compose_2_26_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _fake_docker(tmp_path, "26.1.5+dfsg1", "2.26.1").items():
        monkeypatch.setenv(key, value)
    assert docker_versions.check_engine() == ((26, 1), (2, 26))


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_the_throwaway_ca_signs_a_certificate_for_the_hosts_clients_dial(tmp_path: Path) -> None:
    credentials = ensure_credentials(tmp_path / "state", owner=os.geteuid())
    cert, key = credentials.tls_dir / "tls.crt", credentials.tls_dir / "tls.key"
    assert "OK" in _openssl("verify", "-CAfile", str(credentials.ca_cert), str(cert))
    names = _openssl("x509", "-in", str(cert), "-noout", "-ext", "subjectAltName")
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:triton"):
        assert name in names
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(credentials.admin_token_file.stat().st_mode) == 0o600
    assert len(credentials.admin_token) == 64 and credentials.admin_token != credentials.grafana_password
    assert not (credentials.tls_dir / "ca.key").exists()  # the CA's key stays out of what the proxy mounts
    again = ensure_credentials(tmp_path / "state", owner=os.geteuid())  # reused while present
    assert again.admin_token == credentials.admin_token and (again.tls_dir / "tls.crt").read_bytes() == cert.read_bytes()


def test_your_own_tls_files_replace_the_throwaway_ones(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "tls.crt").write_text("x")
    with pytest.raises(LocalStackError, match=r"lacks tls\.key, ca\.crt"):
        ensure_credentials(tmp_path / "state", owner=os.geteuid(), tls_dir=own)
    (own / "tls.key").write_text("x")
    (own / "ca.crt").write_text("x")
    assert ensure_credentials(tmp_path / "state", owner=os.geteuid(), tls_dir=own).ca_cert == own.resolve() / "ca.crt"
    assert not (tmp_path / "state" / "tls").exists()


def test_the_runs_variables_pick_free_ports_and_only_let_the_gpu_services_interpolate(tmp_path: Path) -> None:
    credentials = ensure_credentials(tmp_path / "state", owner=os.geteuid())
    env = stack_env(Settings(), LocalStack(publish="auto"), credentials, {"DEBIAN_IMAGE": "tde-local/debian:bookworm"})
    assert {env[k] for k in ("PROXY_HTTP_PORT", "PROXY_GRPC_PORT", "PROMETHEUS_PORT")} == {"0"}
    assert env["TRITON_ADMIN_TOKEN"] == credentials.admin_token and env["LOADTEST_CA_FILE"].endswith("ca.crt")
    assert env["TRITON_BASE_DIGEST"] == env["TENSORRT_BASE_DIGEST"] == UNUSED_NGC_DIGEST
    assert env["DEBIAN_IMAGE"] == "tde-local/debian:bookworm" and env["COMPOSE_PROFILES"] == "cpu,monitoring"
    fixed = stack_env(Settings(), LocalStack(), credentials, {})
    assert "PROXY_HTTP_PORT" not in fixed  # the settings' ports, from deploy/.env
    # Compose interpolates every profile's services: the run's variables must satisfy the whole file.
    deploy_dir = Path(__file__).resolve().parents[2] / "deploy"
    committed = parse_env((deploy_dir / ".env").read_text())
    load_compose((deploy_dir / "docker-compose.yml").read_text(), {**committed, **fixed})


def test_every_pinned_base_but_grafana_has_a_local_stand_in() -> None:
    settings = Settings()
    assert {base.variable for base in bases.BASES} == set(PINNED_ENV) - {"GRAFANA_IMAGE"}
    amd64, arm64 = platforms.PLATFORMS
    for base in bases.BASES:
        assert base.local(amd64).startswith(f"{bases.LOCAL_REPO}/") and getattr(settings, base.setting)
        assert base.recipe_text(amd64)  # a rendered Dockerfile, or the debootstrap recipe
        # Each architecture has its own tag and recipe: amd64 and arm64 stand-ins coexist, neither reused for the other.
        assert base.local(amd64).endswith("-amd64") and base.local(arm64) == base.local(amd64)[:-5] + "arm64"
        assert bases._recipe(base, amd64) != bases._recipe(base, arm64)


def test_up_down_and_bases_need_local(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("up", "down", "bases", "build"):
        with pytest.raises(SystemExit) as exit_info:
            main([command])
        assert exit_info.value.code == 2
        assert "--local" in capsys.readouterr().err
