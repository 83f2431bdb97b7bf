"""What a Triton server holds on this machine: RSS and open files of ``tritonserver`` and of each Python-backend
stub, and the ``/dev/shm`` region each stub exchanges tensors through.

The Python backend runs every model instance in a child process, ``triton_python_backend_stub``, started
with the name of its shared-memory region (``triton_python_backend_shm_region_*``) and of the model instance
on its command line (Triton 2.51). Sampling that region's file, rather than all of ``/dev/shm``, keeps other
servers on the same machine out of the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from .errors import LoadTestError, RunError

STUB = "triton_python_backend_stub"
SHM_PREFIX = "triton_python_backend_shm_region"
SHM_DIR = Path("/dev/shm")
SERVER_NAME = "tritonserver"


@dataclass(frozen=True)
class ProcessSample:
    """One process at one moment; ``name`` is ``tritonserver`` or the stub's model instance."""

    name: str
    pid: int
    rss_bytes: int
    fds: int
    shm_bytes: int  # allocated bytes of the stub's /dev/shm region (0 for the server)


@dataclass(frozen=True)
class StubInfo:
    name: str
    shm_region: str | None


def stub_info(cmdline: list[str], pid: int) -> StubInfo:
    """The model instance and shared-memory region named on a stub's command line."""
    region = next((arg for arg in cmdline if arg.startswith(SHM_PREFIX)), None)
    # Triton 2.51: stub model.py region size growth parent-pid backend-dir ipc-id INSTANCE KIND
    name = cmdline[-2] if len(cmdline) >= 9 else f"{STUB} {pid}"
    return StubInfo(name=name, shm_region=region)


def shm_bytes(region: str | None) -> int:
    """Bytes the region really occupies in /dev/shm (tmpfs allocates pages as they are touched)."""
    if region is None:
        return 0
    try:
        return (SHM_DIR / region).stat().st_blocks * 512
    except OSError:
        return 0


class ServerProcesses:
    """``tritonserver`` (by pid) and the stubs among its children, found afresh at every sample."""

    def __init__(self, server_pid: int) -> None:
        try:
            self.server = psutil.Process(server_pid)
            name = self.server.name()
        except psutil.Error as exc:
            raise LoadTestError(f"no process {server_pid} to watch: {exc}") from exc
        if SERVER_NAME not in name:
            raise LoadTestError(f"process {server_pid} is {name!r}, not {SERVER_NAME}")
        self.regions: set[str] = set()

    def _stubs(self) -> list[tuple[psutil.Process, StubInfo]]:
        found = []
        for child in self.server.children(recursive=True):
            try:
                cmdline = child.cmdline()
            except psutil.Error:
                continue  # exited between listing and reading
            if cmdline and Path(cmdline[0]).name == STUB:
                found.append((child, stub_info(cmdline, child.pid)))
        return found

    def sample(self) -> list[ProcessSample]:
        """The server and every live stub now; raises ``RunError`` once the server itself has gone."""
        try:
            samples = [ProcessSample(SERVER_NAME, self.server.pid, self.server.memory_info().rss,
                                     self.server.num_fds(), 0)]
            stubs = self._stubs()
        except psutil.Error as exc:
            raise RunError(f"{SERVER_NAME} (pid {self.server.pid}) is gone: {exc}") from exc
        for process, info in stubs:
            try:
                samples.append(ProcessSample(info.name, process.pid, process.memory_info().rss, process.num_fds(),
                                             shm_bytes(info.shm_region)))
            except psutil.Error:
                continue
            if info.shm_region:
                self.regions.add(info.shm_region)
        return samples

    def regions_left(self) -> list[str]:
        """Shared-memory regions of this server's stubs that still exist (call after the server stopped)."""
        return sorted(r for r in self.regions if (SHM_DIR / r).exists())


def listening_pid(port: int) -> int:
    """The pid of the process listening on TCP ``port`` here; a clear error when it cannot be seen."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        connections = []
    pids = {c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            and c.pid}
    if len(pids) != 1:
        raise LoadTestError(f"cannot tell which process on this machine listens on port {port}: pass --server-pid "
                            "(the soak samples the server's processes, so it runs on the server's machine)")
    return int(pids.pop())

