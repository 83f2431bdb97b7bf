"""``build`` with the network cut: it fails in one line naming ``build --prepare``, and succeeds once that ran.

The network is really cut where this machine allows it: the build runs in a network namespace of its own
(``unshare -n``: only a loopback that is down). Where unprivileged namespaces are not allowed, pip is pointed at a
dead index instead, with no configuration file and no local wheels; the test's id says which. Each build gets a
fresh server cache (TRITON_DETECTION_CACHE), so nothing prepared elsewhere on this machine helps it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.cli import main
from generator.server.ports import free_port
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

ROOT = Path(__file__).resolve().parents[3]


def _can_unshare() -> bool:
    unshare = shutil.which("unshare")
    return unshare is not None and subprocess.run([unshare, "-n", "true"], capture_output=True,
                                                  check=False).returncode == 0


CUT = "unshare -n" if _can_unshare() else "dead index"


def offline(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    """``python -m generator ARGS`` with no network and ``cache`` as the server cache."""
    env = {**os.environ, "TRITON_DETECTION_CACHE": str(cache)}
    command = [sys.executable, "-m", "generator", *args]
    if CUT == "unshare -n":
        command = ["unshare", "-n", *command]
    else:
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple",
                   PIP_RETRIES="0")
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
            env.pop(name, None)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(make_detector(metadata=ultralytics_metadata()), tmp_path_factory.mktemp("offline") / "tiny.onnx")


def build_args(onnx_path: Path, output: Path) -> list[str]:
    return ["build", "--onnx", str(onnx_path), "--output", str(output), "--max-batch", "2"]


@pytest.mark.parametrize("cut", [CUT])
def test_a_build_without_the_network_and_unprepared_fails_in_one_line(onnx_path: Path, tmp_path: Path,
                                                                      cut: str) -> None:
    done = offline(build_args(onnx_path, tmp_path / "repo"), tmp_path / "cache")
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: Triton 2.51.0's config schema is not prepared on this machine")
    assert "run `python -m generator build --prepare` where the network is" in line
    assert not (tmp_path / "repo").exists()  # nothing half-written


@pytest.mark.network
@pytest.mark.parametrize("cut", [CUT])
def test_a_build_without_the_network_works_after_build_prepare(onnx_path: Path, tmp_path: Path, cut: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_DETECTION_CACHE", str(cache))
    assert main(["build", "--prepare"]) == 0
    out = capsys.readouterr().out
    assert "Prepared Triton 2.51.0's config schema from the hash-pinned tritonclient 2.51.0 wheel" in out
    prepared = out.strip().splitlines()[-1]
    assert prepared.startswith(f"Triton 2.51.0 config schema: {cache / 'schemas'}")
    assert main(["build", "--prepare"]) == 0  # already there: where it is, nothing made
    assert capsys.readouterr().out.strip() == prepared
    done = offline(build_args(onnx_path, tmp_path / "repo"), cache)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Prepared" not in done.stdout and "Built " in done.stdout
    assert main(["check", str(tmp_path / "repo")]) == 0
