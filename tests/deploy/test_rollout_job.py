"""deploy.entrypoints.rollout_job --fleet: the Kubernetes Job's way to every Triton pod behind the headless Service."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.commands import k8s_rollout_command
from deploy.entrypoints import rollout_job
from deploy.settings import Settings
from generator.operate.fleet import FleetControl


def test_the_rendered_job_arguments_drive_every_server_on_the_admin_ports(tmp_path: Path) -> None:
    args = rollout_job._parser().parse_args(k8s_rollout_command(Settings()))
    assert args.fleet == "triton-admin.yolo-serving.svc"
    token = tmp_path / "admin_token"
    token.write_text("s3cret\n")
    args.fleet, args.admin_token_file = "localhost", token  # a name this machine resolves
    control = rollout_job.fleet_control(args)
    assert isinstance(control, FleetControl) and control.admin_key == "s3cret"  # from the Secret's file
    members = control.members()
    assert ("127.0.0.1:8000", "127.0.0.1:8002") in [(m.http_url, m.metrics_url) for m in members]


def test_a_url_without_a_port_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = rollout_job.main(["--model-repository", str(tmp_path), "--routing-dir", str(tmp_path / "routing"),
                             "--fleet", "localhost", "--url", "triton-admin", "--rollback"])
    assert code == 1
    assert capsys.readouterr().err.strip() == "rollout: --url 'triton-admin' must be HOST:PORT"
