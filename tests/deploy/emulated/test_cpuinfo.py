"""The emulated lane's aarch64 /proc/cpuinfo (tests/deploy/emulated/cpuinfo.py): what it writes and where it mounts
it. No Docker: the lane itself proves that onnxruntime imports with it."""

from __future__ import annotations

from pathlib import Path

import yaml

from deploy.local.stack import COMPOSE_FILE
from tests.deploy.emulated import cpuinfo

X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu sse2\n\n"


def test_the_written_cpuinfo_is_an_arm_one_with_a_processor_per_cpu(tmp_path: Path) -> None:
    path = cpuinfo.write_aarch64_cpuinfo(tmp_path / "cpuinfo")
    text = path.read_text(encoding="utf-8")
    assert cpuinfo.shows_aarch64(text) and not cpuinfo.shows_aarch64(X86)
    assert text.count("processor\t:") == text.count("CPU implementer\t: 0x41") >= 1
    assert path.stat().st_mode & 0o777 == 0o644  # the container's user 1000 reads it


def test_the_mount_goes_into_tritons_service_only_and_keeps_the_rest(tmp_path: Path) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(COMPOSE_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    before = yaml.safe_load(compose.read_text(encoding="utf-8"))
    cpuinfo.mount_into(compose, "triton-cpu", tmp_path / "cpuinfo")
    after = yaml.safe_load(compose.read_text(encoding="utf-8"))
    bind = after["services"]["triton-cpu"]["volumes"].pop()
    assert bind == {"type": "bind", "source": str(tmp_path / "cpuinfo"), "target": "/proc/cpuinfo", "read_only": True}
    assert after == before
