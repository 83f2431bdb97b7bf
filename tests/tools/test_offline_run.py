"""tools/gpu/offline_run.sh: the device calls `plan` prints for what `prepare` left (a CPU-only versus run, or the
GPU run), and the refusal of a CPU-only prepare that has no model to compare."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.demo import DEMO_ONNX

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu" / "offline_run.sh"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout holding the script, with three archive parts staged as `prepare` leaves them."""
    (tmp_path / "tools" / "gpu").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "tools" / "gpu" / "offline_run.sh")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("/.device/\n")
    for n in (1, 2, 3):
        part = tmp_path / ".device" / "run" / f"p0{n}"
        part.mkdir(parents=True)
        (part / f"tde-offline-cpu-py3.12-x86_64.tar.00{n}-of-003").write_bytes(b"x" * 1000)
    return tmp_path


def _calls(checkout: Path) -> list[tuple[str, str]]:
    done = subprocess.run(["bash", "tools/gpu/offline_run.sh", "plan"], cwd=checkout, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return re.findall(r"^  call \d+: carry \[([^]]*)\] \([^)]*\): (.*)$", done.stdout, re.M)


def test_a_cpu_only_versus_run_installs_then_runs_versus_three_ways(checkout: Path) -> None:
    (checkout / ".device" / "run" / "versus").mkdir()
    (checkout / ".device" / "run" / "versus" / "model.onnx").write_bytes(b"onnx")
    assert _calls(checkout) == [
        (".device/run/p01", "bash tools/gpu/offline_run.sh keep"),
        (".device/run/p02", "bash tools/gpu/offline_run.sh keep"),
        (".device/run/p03, .device/run/versus", "bash tools/gpu/offline_run.sh install"),
        ("", "bash tools/gpu/offline_run.sh versus"),
        ("", "CORES=1,2 bash tools/gpu/offline_run.sh versus"),
        ("", "SPIN=1 bash tools/gpu/offline_run.sh versus"),
        ("", "bash tools/gpu/offline_run.sh probe"),
    ]


def test_the_gpu_run_carries_the_repositories_and_measures_main_then_more(checkout: Path) -> None:
    (checkout / ".device" / "run" / "data" / "demo").mkdir(parents=True)
    calls = _calls(checkout)
    assert calls[2] == (".device/run/p03, .device/run/data", "bash tools/gpu/offline_run.sh install")
    assert [command for _, command in calls[3:]] == ["bash tools/gpu/offline_run.sh main",
                                                       "bash tools/gpu/offline_run.sh more"]


def test_a_cpu_only_prepare_needs_the_model_to_compare(checkout: Path) -> None:
    done = subprocess.run(["bash", "tools/gpu/offline_run.sh", "prepare"], cwd=checkout, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**{k: v for k, v in os.environ.items() if k != "VERSUS_ONNX"}, "STUBS": "cpu"})
    assert done.returncode != 0 and "STUBS=cpu prepares versus: give VERSUS_ONNX=PATH" in done.stdout
    assert (checkout / ".device" / "run" / "p01").is_dir()  # a refused prepare leaves the last one as it was


def test_the_bound_call_follows_when_the_instance_variants_were_built(checkout: Path) -> None:
    for name in ("y11", "y11_d4", "y11_p4"):
        (checkout / ".device" / "run" / "data" / name).mkdir(parents=True)
    (checkout / ".device" / "run" / "versus").mkdir()
    calls = _calls(checkout)
    assert calls[2][0] == ".device/run/p03, .device/run/data, .device/run/versus"
    assert [command for _, command in calls[3:]] == [
        "bash tools/gpu/offline_run.sh versus", "CORES=1,2 bash tools/gpu/offline_run.sh versus",
        "SPIN=1 bash tools/gpu/offline_run.sh versus", "bash tools/gpu/offline_run.sh probe",
        "bash tools/gpu/offline_run.sh bound"]


def test_a_helper_stages_its_code_beside_each_call_in_the_sessions_checkout(checkout: Path) -> None:
    (checkout / ".device" / "run" / "versus").mkdir()
    for folder in ("generator", "loadtest", "clients"):
        (checkout / folder).mkdir()
        (checkout / folder / "__init__.py").write_text("")
    subprocess.run(["git", "add", "-A"], cwd=checkout, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"], cwd=checkout, check=True)
    done = subprocess.run(["bash", "tools/gpu/offline_run.sh", "plan"], cwd=checkout, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "STAGE_IN": ".device/me"})
    calls = re.findall(r"^  call \d+: carry \[([^]]*)\] \([^)]*\): (.*)$", done.stdout, re.M)
    code = ".device/me/generator, .device/me/loadtest, .device/me/tools, .device/me/clients"
    assert calls[0] == (f"{code}, .device/me/.device/run/p01", "cd .device/me && bash tools/gpu/offline_run.sh keep")
    assert calls[-1] == (code, "cd .device/me && bash tools/gpu/offline_run.sh probe")


def test_probe_runs_the_spin_probe_pinned_to_each_core_count_on_the_carried_model(checkout: Path) -> None:
    shutil.copy(SCRIPT.parent / "spin_probe.py", checkout / "tools" / "gpu" / "spin_probe.py")
    (checkout / ".device" / "run" / "versus").mkdir()
    shutil.copy(DEMO_ONNX, checkout / ".device" / "run" / "versus" / "model.onnx")
    out = checkout / "out"
    done = subprocess.run(["bash", "tools/gpu/offline_run.sh", "probe"], cwd=checkout, capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "OUT": str(out), "CORES": "1", "PY": sys.executable,
                               "PROBE_ARGS": "--rounds 1 --window 0", "TDE_TMP": str(checkout / "tmp")})
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((out / "spin-probe-c1.json").read_text())
    assert record["cores"] == 1  # pinned with taskset, as on the device
    assert "1 cores | spin-stop | 2 streams" in (out / "spin-probe.txt").read_text()
