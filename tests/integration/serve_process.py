"""`python -m generator serve` as a child process, the way an operator runs it, for the integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from generator.server.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    """Starts the command, collects its output lines (Triton's log included) and finds its processes."""

    def __init__(self, repositories: list[Path], *flags: str, env: dict[str, str] | None = None,
                 log_file: Path | None = None, ports: tuple[int, int, int] | None = None,
                 watchdog_port: int | None = -1) -> None:
        """``ports``: HTTP, gRPC and metrics (default: free ones); ``watchdog_port``: None leaves the flag out
        (serve derives it), -1 (default) a free one."""
        self.http_port, self.grpc_port, self.metrics_port = ports or (free_port(), free_port(), free_port())
        self.watchdog_port = free_port() if watchdog_port == -1 else watchdog_port
        watchdog = [] if self.watchdog_port is None else ["--watchdog-metrics-port", str(self.watchdog_port)]
        command = [sys.executable, "-m", "generator", "serve",
                   *(f"--model-repository={r}" for r in repositories),
                   "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                   "--metrics-port", str(self.metrics_port), *watchdog, *flags]
        self.lines: list[str] = []
        self._log = log_file
        self.process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **(env or {})}, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if self._log is not None:
                with self._log.open("a") as log:
                    log.write(line)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def wait_for(self, pattern: str, timeout_s: float = 120.0, after: int = 0) -> re.Match[str]:
        """The first output line from index `after` on that matches `pattern`."""
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        seen = after
        while True:
            lines = self.lines[seen:]
            for line in lines:
                if match := regex.search(line):
                    return match
            seen += len(lines)
            if self.process.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"serve exited ({self.process.returncode}) before {pattern!r}:\n"
                                     + "\n".join(self.lines[-40:]))
            if time.monotonic() > deadline:
                raise AssertionError(f"no line matching {pattern!r} in {timeout_s} s:\n" + "\n".join(self.lines[-40:]))
            time.sleep(0.05)

    def watchdog_metrics(self) -> dict[str, float]:
        """The watchdog's counters now: name, or name{label=value}, to value."""
        from loadtest.metrics import parse_prometheus, scrape

        return {s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value
                for s in parse_prometheus(scrape(f"127.0.0.1:{self.watchdog_port}"))}

    def triton(self) -> psutil.Process:
        """The tritonserver child serve runs now."""
        children = [p for p in psutil.Process(self.process.pid).children() if "tritonserver" in p.name()]
        assert len(children) == 1, children
        return children[0]

    def stubs(self, instance: str) -> list[psutil.Process]:
        """This server's Python-backend stubs of one model instance (their command line names it)."""
        return [p for p in self.triton().children()
                if p.cmdline()[:1] and p.cmdline()[0].endswith("triton_python_backend_stub")
                and instance in p.cmdline()]

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(10)
        return code
