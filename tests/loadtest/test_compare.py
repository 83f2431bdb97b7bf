"""``python -m loadtest compare`` against the real embedded Triton (the same server under two names)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_compare_alternates_the_servers_and_takes_differences_within_rounds(triton_server, tmp_path):
    url = triton_server.grpc_url
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "compare", "--server", f"before={url}", "--server", f"after=grpc://{url}",
         "--model", triton_server.model_name, "--size", "320x240", "--rounds", "3", "--window", "1",
         "--concurrency", "2", "--label", "self", "--results-dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=180, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (json_file,) = tmp_path.glob("*-self.json")
    compared = json.loads(json_file.read_text())
    rounds = compared["rounds"]
    assert [r["order"] for r in rounds] == [["before", "after"], ["after", "before"], ["before", "after"]]
    for r in rounds:
        assert r["before"]["failures"] == 0 and r["after"]["failures"] == 0
        assert r["rps_ratio"] == pytest.approx(r["after"]["rps"] / r["before"]["rps"], abs=0.002)
        assert r["p50_c1_delta_ms"] == pytest.approx(r["after"]["p50_c1_ms"] - r["before"]["p50_c1_ms"], abs=0.11)
    summary = compared["summary"]["rps_ratio"]
    assert summary["min"] <= summary["median"] <= summary["max"]
    assert "| round | first | before rps | after rps | after/before |" in (tmp_path / json_file.name.replace(
        ".json", ".md")).read_text()


@pytest.mark.parametrize("servers", [[], ["a=h:1"], ["a=h:1", "a=h:2"], ["a:h:1", "b=h:2"]])
def test_compare_needs_two_named_servers(servers, capsys):
    argv = ["compare"] + [part for spec in servers for part in ("--server", spec)]
    assert main(argv) == 1
    assert "--server" in capsys.readouterr().err
