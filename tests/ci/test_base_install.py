"""Every entry point in an environment with only the base install names the extra to install, in one line.

The environment is what ``pip install -e .`` makes, without pip's time: a fresh venv holding the base dependency
(numpy, linked from the running interpreter's) and this checkout on a ``.pth`` line, as an editable install
writes it. No package index is needed and it takes a few seconds.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("base") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    installed = Path(numpy.__file__).parent.parent
    for name in ("numpy", "numpy.libs"):
        if (installed / name).exists():
            (purelib / name).symlink_to(installed / name)
    (purelib / "triton_detection_ensemble.pth").write_text(f"{ROOT}\n")
    assert purelib != Path(sysconfig.get_paths()["purelib"])
    return python


def run(python: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *argv], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(python.parent)})


@pytest.mark.parametrize(("argv", "needs", "extras"), [
    (["-m", "deploy", "up", "--local"], "python -m deploy up needs the deploy extra", "deploy"),
    (["-m", "deploy", "render"], "python -m deploy render needs the deploy extra", "deploy"),
    (["-m", "generator", "build"], "python -m generator build needs the build extra", "build"),
    (["-m", "generator", "rollout", "--help"], "python -m generator rollout needs the rollout extra", "rollout"),
    (["-m", "loadtest", "run"], "python -m loadtest run needs the loadtest extra", "loadtest"),
    (["-m", "loadtest", "bench"], "python -m loadtest bench needs the build and loadtest extras", "build,loadtest"),
    (["-m", "clients.detect", "x.jpg"], "python -m clients.detect needs the client extra", "client"),
    (["-m", "clients.stream", "--help"], "python -m clients.stream needs the client extra", "client"),
])
def test_a_missing_extra_is_one_line_naming_it(base_python: Path, argv: list[str], needs: str, extras: str) -> None:
    proc = run(base_python, *argv)
    assert proc.returncode == 1, proc.stderr
    install = re.escape('pip install -e ".[' + extras + ']"')
    line = rf"error: {re.escape(needs)} \(no module named '[\w.]+'\): {install}"
    assert len(proc.stderr.splitlines()) == 1 and re.fullmatch(line, proc.stderr.strip()), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_what_needs_no_extra_still_runs_there(base_python: Path, tmp_path: Path) -> None:
    assert run(base_python, "-m", "deploy", "--help").returncode == 0
    assert run(base_python, "-m", "generator", "--help").returncode == 0
    check = run(base_python, "-m", "generator", "check", str(tmp_path))
    assert (check.returncode, check.stderr.strip()) == (
        1, f"error: {tmp_path} has no manifest.json; build it with python -m generator build")


def test_the_clients_imported_as_a_library_keep_the_import_error(base_python: Path) -> None:
    proc = run(base_python, "-c", "import clients")
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith("ModuleNotFoundError: No module named")
