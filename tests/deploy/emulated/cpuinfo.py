"""An aarch64 ``/proc/cpuinfo`` for the emulated lane's Triton container, where the emulator shows the host's.

Debian 12's qemu-user-static (7.2) passes the host's x86 ``/proc/cpuinfo`` through to an aarch64 process.
onnxruntime's aarch64 extension initialises pytorch/cpuinfo as it is loaded; from onnxruntime 1.28 on (1.32 here;
1.20-1.27 import under the same qemu) that faults on a NULL address when the file lists no Arm processor, and
``import onnxruntime`` dies with SIGSEGV (``QEMU_STRACE``: its last calls read /proc/cpuinfo and
/sys/devices/system/cpu/*/cache; an aarch64 file mounted over it, and nothing else, lets it import). Newer qemu-user
(Debian 13's 10.0, measured) writes an aarch64 cpuinfo of its own, as an arm64 kernel does: there nothing is
mounted.

This is an emulation-only workaround, made by the lane in its own copy of the installed site's compose file; it is
never part of the compose file a site renders or installs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

# One Neoverse-N1 core as an arm64 kernel lists it (Graviton 2 class).
_CORE = """processor\t: {n}
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

"""
TARGET = "/proc/cpuinfo"


def shows_aarch64(cpuinfo: str) -> bool:
    """Whether a ``/proc/cpuinfo`` read in an arm64 container is an Arm one (the kernel's or qemu >= 8.2's)."""
    return any(line.startswith("CPU implementer") for line in cpuinfo.splitlines())


def write_aarch64_cpuinfo(path: Path) -> Path:
    """An aarch64 cpuinfo with one entry per CPU this machine has online (as the emulated process sees in sysfs)."""
    path.write_text("".join(_CORE.format(n=n) for n in range(os.cpu_count() or 1)), encoding="utf-8")
    path.chmod(0o644)  # read by the container's user 1000
    return path


def mount_into(compose_file: Path, service: str, cpuinfo: Path) -> None:
    """Bind ``cpuinfo`` read-only over ``service``'s /proc/cpuinfo in ``compose_file`` (the lane's site copy)."""
    spec: dict[str, Any] = yaml.safe_load(compose_file.read_text(encoding="utf-8"))
    volumes = spec["services"][service].setdefault("volumes", [])
    volumes.append({"type": "bind", "source": str(cpuinfo), "target": TARGET, "read_only": True})
    compose_file.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
