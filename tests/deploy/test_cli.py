from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deploy.cli import main


def test_render_then_check_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--out", str(tmp_path), "--set", "model_name=det"]) == 0
    assert (tmp_path / "docker-compose.yml").is_file() and (tmp_path / "k8s" / "kustomization.yaml").is_file()
    assert main(["check", "--dir", str(tmp_path), "--set", "model_name=det"]) == 0
    assert "current, valid and hardened" in capsys.readouterr().out
    # The same tree checked against the default settings has drifted.
    assert main(["check", "--dir", str(tmp_path)]) == 1
    assert "differs from `python -m deploy render`" in capsys.readouterr().err


def test_check_reports_a_hardening_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--out", str(tmp_path)]) == 0
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(compose.read_text().replace("read_only: true\n    cap_drop", "read_only: false\n    cap_drop", 1))
    assert main(["check", "--dir", str(tmp_path), "--no-drift"]) == 1
    err = capsys.readouterr().err
    assert "service pod: read_only must be true" in err and "1 problem(s)" in err


def test_user_errors_print_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--out", str(tmp_path), "--set", "triton_release=25.01"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "25.07" in err[0]
    assert not (tmp_path / "docker-compose.yml").exists()


def test_show_prints_the_shm_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert "-> 448 MiB" in out and "PREPROCESSED 1228800" in out and "head 201600" in out
    assert "max_request_bytes (proxy body limit, --http-max-input-size) = 33620096 B" in out


def test_help_and_the_module_docstring_name_every_subcommand(capsys) -> None:
    import deploy.cli

    with pytest.raises(SystemExit):
        deploy.cli.main(["--help"])
    shown = capsys.readouterr().out
    subcommands = next(a.choices for a in deploy.cli._parser()._actions
                       if isinstance(a, argparse._SubParsersAction))
    assert len(subcommands) == 11
    for name in subcommands:
        assert f"``{name}``" in (deploy.cli.__doc__ or ""), name
        assert f"    {name} " in shown, name
