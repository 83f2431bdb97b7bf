"""The lock files and how a stub environment is chosen and named; tests/integration makes the real ones."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from generator.errors import ServerError
from generator.server.embedded import EmbeddedServer, ServerInstall
from generator.server.environments import (
    DIGEST_FILE,
    LOCKS,
    PERF_ANALYZER,
    STUB_CPU,
    STUB_GPU,
    Environment,
    LockedEnvironment,
    ensure_environment,
    is_verified,
    stub_environment_for,
)

ALL = (STUB_CPU, STUB_GPU, PERF_ANALYZER)
_PIN = re.compile(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)", re.MULTILINE)


def pins(text: str) -> set[tuple[str, str]]:
    return {(name.split("[")[0].lower(), version) for name, version in _PIN.findall(text)}


@pytest.mark.parametrize("locked", ALL, ids=lambda e: e.name)
def test_every_requirement_of_a_lock_carries_hashes(locked: LockedEnvironment) -> None:
    """pip --require-hashes refuses a lock with one unhashed pin; so does this test, earlier."""
    entries = re.split(r"\n(?=[A-Za-z])", locked.lock.read_text().split("\n", 2)[-1].strip())
    assert entries and all("==" in e and "--hash=sha256:" in e for e in entries), locked.lock.name


@pytest.mark.parametrize("locked", ALL, ids=lambda e: e.name)
def test_each_lock_holds_what_its_in_file_asks_for(locked: LockedEnvironment) -> None:
    wanted = pins((LOCKS / f"{locked.name}.in").read_text())
    assert wanted <= pins(locked.lock.read_text())


def test_the_stub_environments_keep_numpy_1() -> None:
    for locked in (STUB_CPU, STUB_GPU):
        assert ("numpy", "1.26.4") in pins(locked.lock.read_text())
        assert ("opencv-python-headless", "4.11.0.86") in pins(locked.lock.read_text())
    assert ("cupy-cuda13x", "13.6.0") in pins(STUB_GPU.lock.read_text())
    assert not {name for name, _ in pins(STUB_GPU.lock.read_text())} & {"onnxruntime"}  # the GPU build only


def test_the_location_names_the_python_and_the_lock_digest(tmp_path: Path) -> None:
    where = STUB_CPU.location(tmp_path)
    assert where.parent == tmp_path / "environments"
    assert where.name == f"stub-cpu-py{sys.version_info.major}.{sys.version_info.minor}-{STUB_CPU.digest()[:16]}"
    assert STUB_CPU.location(tmp_path) != STUB_GPU.location(tmp_path)


def test_an_environment_is_verified_only_with_its_lock_digest(tmp_path: Path) -> None:
    assert not is_verified(tmp_path, STUB_CPU)  # never finished: no digest file
    (tmp_path / DIGEST_FILE).write_text(STUB_GPU.digest() + "\n")
    assert not is_verified(tmp_path, STUB_CPU)
    (tmp_path / DIGEST_FILE).write_text(STUB_CPU.digest() + "\n")
    assert is_verified(tmp_path, STUB_CPU)


def test_a_verified_environment_is_used_as_it_is(tmp_path: Path) -> None:
    root = STUB_CPU.location(tmp_path)
    root.mkdir(parents=True)
    (root / DIGEST_FILE).write_text(STUB_CPU.digest())
    assert ensure_environment(STUB_CPU, tmp_path) == Environment(root)


def test_too_old_a_python_is_refused_with_the_reason(tmp_path: Path) -> None:
    future = LockedEnvironment("stub-gpu", min_python=(3, 99))
    with pytest.raises(ServerError, match=r"the stub-gpu environment needs Python >= 3\.99"):
        ensure_environment(future, tmp_path)
    assert not (tmp_path / "environments").exists()


def _model(repository: Path, name: str, backend: str, kind: str) -> None:
    (repository / name).mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\ninstance_group [ {{ count: 1, kind: {kind} }} ]\n')


def test_a_python_model_on_the_gpu_chooses_the_gpu_stub_environment(tmp_path: Path) -> None:
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    _model(cpu, "pre", "python", "KIND_CPU")
    _model(cpu, "det", "onnxruntime", "KIND_GPU")  # not a stub: the NGC image's ORT backend
    _model(gpu, "pre", "python", "KIND_GPU")
    assert stub_environment_for([cpu]) is STUB_CPU
    assert stub_environment_for([cpu, gpu]) is STUB_GPU
    assert EmbeddedServer(gpu).stub is STUB_GPU and EmbeddedServer(cpu).stub is STUB_CPU


def test_the_server_puts_the_stub_environment_first_on_path(tmp_path: Path) -> None:
    stub = Environment(tmp_path / "stub")
    env = EmbeddedServer(tmp_path).environment(ServerInstall(tmp_path / "server"), stub)
    assert env["PATH"].split(":")[0] == str(stub.bin)
    assert "PYTHONHOME" not in env


def test_environments_are_filled_by_this_interpreters_pip_old_or_new(tmp_path: Path) -> None:
    """venvs are made without ensurepip; pip >= 22.3 installs into them with --python, an older one with --prefix."""
    from generator.server.environments import pip_into

    new = pip_into(tmp_path, (24, 0))
    assert new[:5] == [sys.executable, "-m", "pip", "--python", str(tmp_path / "bin" / "python")]
    old = pip_into(tmp_path, (22, 2))
    assert "--python" not in old and old[old.index("--prefix") + 1] == str(tmp_path) and "--ignore-installed" in old


def _openvino_detector(repository: Path) -> None:
    (repository / "det").mkdir(parents=True)
    (repository / "det" / "config.pbtxt").write_text(
        'name: "det"\nbackend: "python"\ninstance_group [ { count: 2, kind: KIND_CPU } ]\n'
        'parameters {\n  key: "cpu_engine"\n  value { string_value: "openvino" }\n}\n')


def test_an_openvino_detector_chooses_the_openvino_stub_environment(tmp_path: Path) -> None:
    from generator.errors import ServerError
    from generator.server.environments import STUB_OPENVINO

    cpu, openvino, gpu = tmp_path / "cpu", tmp_path / "openvino", tmp_path / "gpu"
    _model(cpu, "pre", "python", "KIND_CPU")
    _openvino_detector(openvino)
    _model(gpu, "pre", "python", "KIND_GPU")
    assert stub_environment_for([openvino]) is STUB_OPENVINO
    assert stub_environment_for([cpu, openvino]) is STUB_OPENVINO  # its lock holds every pin of the CPU one
    assert EmbeddedServer(openvino).stub is STUB_OPENVINO
    with pytest.raises(ServerError, match="need two stub environments"):
        stub_environment_for([openvino, gpu])


def test_the_openvino_lock_pins_the_cpu_locks_packages_and_openvino() -> None:
    from generator.server.environments import STUB_OPENVINO
    from generator.server.offline import lock_hashes

    cpu, openvino = STUB_CPU.lock.read_text(), STUB_OPENVINO.lock.read_text()
    assert lock_hashes(cpu).items() <= lock_hashes(openvino).items()
    assert "openvino==" in openvino
