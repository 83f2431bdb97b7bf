"""Keep a Triton server serving: probe it with a real inference, restart it when it stops answering.

Since Triton 24.06 the Python backend no longer restarts a crashed stub, and on 2.51 ``/v2/health/ready``
and ``/v2/models/<m>/ready`` stay 200 while every request fails "Stub process ... is not healthy". Only a
real inference tells, so the probe sends one (a tiny JPEG through the ensemble) after the readiness check.
It runs with request priority 1, the highest, so it overtakes queued user traffic on composing models
configured with ``priority_levels: 2``; on models without priority levels Triton maps it to the default level.

    python3 watchdog.py probe --url HOST:PORT --model NAME [--timeout-s S]
        exit 0 when healthy, 1 with one line when not: the Kubernetes liveness probe, the compose healthcheck.
    python3 watchdog.py supervise --url HOST:PORT --model NAME --failures N --interval-s S --grace-s G \\
            -- tritonserver ARGS...
        starts the server, probes it every S seconds, and after N failed probes (in a row, or among the last
        2N-1), or at once when a probe finds a dead Python-backend stub (it never comes back by itself), stops
        it (SIGTERM, SIGKILL after G seconds) and exits 1 so the container's restart policy starts a fresh one. SIGTERM is passed
        on to the server, which drains the requests in flight (see generator/server/shutdown.py).
        ``--restart-on stub_exited,dead_stub [--restart-grace-s S]`` restarts the server in place for those
        reasons instead (a lost stub: a fresh server loads in seconds, a fresh container takes longer).

``python -m generator serve`` uses the same `Supervisor` with ``restart=True``. Standard library only: this
file is copied alone into the Triton image; ``python -m generator.server.watchdog`` runs it from the package.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import http.server
import json
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

# 32x32 grey JPEG with a coloured square (735 bytes): decodes everywhere, exercises the full path.
PROBE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAA0JCgsKCA0LCgsODg0PEyAVExISEyccHhcgLikxMC4pLSwzOko+MzZGNywtQFdBRkxO"
    "UlNSMj5aYVpQYEpRUk//2wBDAQ4ODhMREyYVFSZPNS01T09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT09P"
    "T09PT09PT0//wAARCAAgACADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF"
    "BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW"
    "V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi"
    "4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC"
    "AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm"
    "Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq"
    "8vP09fb3+Pn6/9oADAMBAAIRAxEAPwCtRRW/XJisV7C2l7m1Kl7S+pgUVv1iXH/HxJ/vn+dLDYv27ataw6tH2avcjrfrAqTz5v8A"
    "nrJ/30aMXhnXtZ2sFGqqd7m3WJcf8fEn++f50efN/wA9ZP8Avo0wkkkk5J71OEwjoNtu9wrVlUSSR//Z"
)

# The ensemble contract (generator/serving/contract.py; a test keeps these equal, this file cannot import it).
INPUT_NAME = "IMAGE"
COUNT_OUTPUT = "num_detections"
# Highest request priority: ahead of user traffic (default level 2) on models with priority_levels 2.
PROBE_PRIORITY = 1
# Marks the probe so the steps leave it out of the quality metrics (the ensemble forwards it to every step).
PROBE_PARAMETER = "tde_probe"
_DEAD_STUB = re.compile(r"Stub process '[^']+' is not healthy")
EXIT_UNHEALTHY = 1
STUB_CHECK_S = 1.0  # how often the supervisor counts the server's Python-backend stubs


class ProbeError(Exception):
    """The server or one of its models cannot serve; the message says what failed.

    `lasting` marks a failure that cannot heal by itself: a dead Python-backend stub, which the backend
    stopped restarting in 24.06 ("Stub process '<instance>' is not healthy.", python_backend stub_launcher).
    """

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


class WatchdogError(Exception):
    """The supervised server never became healthy, so there is nothing to watch."""


# --- the probe ---------------------------------------------------------------------------------------------


def parse_address(url: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` or ``http://HOST:PORT``; Triton's HTTP port 8000 when none is given."""
    text = url.strip()
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme.lower() != "http":
            raise ProbeError(f"the probe speaks plain HTTP to Triton; got {url!r}")
    text = text.rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or host.endswith(":") or (host.startswith("[") != host.endswith("]")):
        host, port = text, "8000"  # no port, or a bare IPv6 literal
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ProbeError(f"cannot read HOST:PORT from {url!r}")
    return host, int(port)


def _request(address: tuple[str, int], method: str, path: str, timeout_s: float,
             body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP exchange on a fresh connection, closed afterwards (an idle keep-alive would delay a drain)."""
    if timeout_s <= 0:
        raise ProbeError("the probe ran out of time")
    conn = http.client.HTTPConnection(*address, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers={"Connection": "close", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    except TimeoutError as exc:
        raise ProbeError(f"no answer from Triton at {address[0]}:{address[1]} within {timeout_s:.1f} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise ProbeError(f"cannot reach Triton at {address[0]}:{address[1]}: {exc or type(exc).__name__}") from exc
    finally:
        conn.close()


def check_ready(address: tuple[str, int], models: Sequence[str], timeout_s: float) -> None:
    """Each model answers 200 on its ready URL; with no model, the server's ready URL does."""
    paths = [f"/v2/models/{m}/ready" for m in models] or ["/v2/health/ready"]
    for path in paths:
        status, _ = _request(address, "GET", path, timeout_s)
        if status != 200:
            what = f"model {path.split('/')[3]}" if models else "the server"
            raise ProbeError(f"{what} is not ready (HTTP {status})")


def build_infer_body(image: bytes, priority: int = PROBE_PRIORITY) -> tuple[bytes, int]:
    """KServe v2 binary-tensor request: JSON header, then the BYTES element as <u32 length><data>."""
    element = struct.pack("<I", len(image)) + image
    header = json.dumps(
        {
            "parameters": {"priority": priority, PROBE_PARAMETER: True},
            "inputs": [
                {
                    "name": INPUT_NAME,
                    "shape": [1, 1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(element)},
                }
            ],
            "outputs": [{"name": COUNT_OUTPUT, "parameters": {"binary_data": False}}],
        }
    ).encode()
    return header + element, len(header)


def check_inference(address: tuple[str, int], model: str, timeout_s: float) -> int:
    """Run the probe image through the ensemble; return its detection count."""
    body, header_len = build_infer_body(PROBE_JPEG)
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(header_len)}
    status, payload = _request(address, "POST", f"/v2/models/{model}/infer", timeout_s, body, headers)
    if status != 200:
        text = _error_text(payload)
        lasting = _DEAD_STUB.search(text) is not None
        raise ProbeError(f"inference on {model} failed (HTTP {status}): {text}", lasting=lasting)
    try:
        outputs = {o["name"]: o for o in json.loads(payload)["outputs"]}
        count = int(outputs[COUNT_OUTPUT]["data"][0])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ProbeError(f"inference on {model} returned no {COUNT_OUTPUT}: {payload[:200]!r}") from exc
    if count < 0:
        raise ProbeError(f"inference on {model} returned a negative detection count {count}")
    return count


def _error_text(payload: bytes) -> str:
    try:
        return str(json.loads(payload)["error"])
    except (ValueError, KeyError, TypeError):
        return repr(payload[:200])


def probe(url: str, models: Sequence[str], timeout_s: float = 5.0) -> None:
    """Readiness of every model, then one real inference each, all within `timeout_s`; ProbeError if not."""
    address = parse_address(url)
    deadline = time.monotonic() + timeout_s
    if not models:
        check_ready(address, (), timeout_s)
    for model in models:
        check_ready(address, (model,), deadline - time.monotonic())
        check_inference(address, model, deadline - time.monotonic())


# --- what the watchdog tells Prometheus --------------------------------------------------------------------

# Why the supervisor stopped a server: the ``reason`` label of triton_watchdog_restarts_total.
RESTART_REASONS = ("start_failed", "server_exited", "stub_exited", "dead_stub", "probe_failures")
STOPPED = "stopped"  # a stop request: not a restart


@dataclass(frozen=True)
class Unhealthy:
    """Why a server is judged unhealthy: ``kind`` (one of RESTART_REASONS, or STOPPED) and the message."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message


class WatchdogMetrics:
    """Restarts by reason, failed probes, server starts and whether the server is healthy, in Prometheus' text
    format (``render``), served by ``serve_metrics``.

    With ``state_file`` the counters are saved on every change and read back at start, so they survive the
    watchdog's own restart: in a container it exits 1 for the runtime to restart it (keep the file on a volume
    that outlives the container, such as a pod's emptyDir).
    """

    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file
        self._lock = threading.Lock()
        self.restarts = dict.fromkeys(RESTART_REASONS, 0)
        self.failed_probes = 0
        self.starts = 0
        self.healthy = False
        self.started_at = time.time()
        if state_file is not None and state_file.is_file():
            try:
                saved = json.loads(state_file.read_text())
                self.restarts.update({k: int(v) for k, v in saved["restarts"].items() if k in self.restarts})
                self.failed_probes, self.starts = int(saved["failed_probes"]), int(saved["starts"])
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                logger.warning("ignoring the unreadable watchdog state %s: %s", state_file, exc)

    def count(self, *, restart: str | None = None, failed_probe: bool = False, start: bool = False) -> None:
        with self._lock:
            if restart is not None:
                self.restarts[restart] += 1
            self.failed_probes += failed_probe
            self.starts += start
            self._save()

    def set_healthy(self, healthy: bool) -> None:
        self.healthy = healthy

    def _save(self) -> None:
        if self.state_file is None:
            return
        state = {"restarts": self.restarts, "failed_probes": self.failed_probes, "starts": self.starts}
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            staging = self.state_file.with_name(self.state_file.name + ".tmp")
            staging.write_text(json.dumps(state))
            staging.replace(self.state_file)
        except OSError as exc:
            logger.warning("cannot save the watchdog state to %s: %s", self.state_file, exc)

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP triton_watchdog_restarts_total Servers the watchdog stopped as unhealthy, by reason",
                "# TYPE triton_watchdog_restarts_total counter",
                *(f'triton_watchdog_restarts_total{{reason="{r}"}} {n}' for r, n in self.restarts.items()),
                "# HELP triton_watchdog_failed_probes_total Real-inference probes that failed",
                "# TYPE triton_watchdog_failed_probes_total counter",
                f"triton_watchdog_failed_probes_total {self.failed_probes}",
                "# HELP triton_watchdog_server_starts_total Times the watchdog started tritonserver",
                "# TYPE triton_watchdog_server_starts_total counter",
                f"triton_watchdog_server_starts_total {self.starts}",
                "# HELP triton_watchdog_healthy 1 while the last probe of the running server passed",
                "# TYPE triton_watchdog_healthy gauge",
                f"triton_watchdog_healthy {int(self.healthy)}",
                "# HELP triton_watchdog_start_time_seconds When this watchdog process started (a new value: its "
                "container restarted)",
                "# TYPE triton_watchdog_start_time_seconds gauge",
                f"triton_watchdog_start_time_seconds {self.started_at:.3f}",
            ]
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: WatchdogMetrics, host: str, port: int,
                  extra: Callable[[], str] | None = None) -> http.server.ThreadingHTTPServer:
    """Serve ``GET /metrics`` on a daemon thread; ``shutdown()`` the returned server to stop. ``extra`` adds
    more series (``generator serve``: the GPUs', gpu_metrics.py)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = (metrics.render() + (extra() if extra else "")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="watchdog-metrics", daemon=True).start()
    return server


# --- the supervisor ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchPolicy:
    """When the supervisor gives up on a server, and how long it lets one stop."""

    failures: int = 3  # failed probes among the last 2 * failures - 1 (N in a row, or a server failing every other)
    interval_s: float = 10.0  # between probes
    timeout_s: float = 5.0  # one probe, readiness and inference together
    grace_s: float = 40.0  # SIGTERM to SIGKILL when asked to stop: the server drains meanwhile
    restart_grace_s: float | None = None  # the same for an unhealthy server; None: grace_s
    start_timeout_s: float = 600.0  # from start to the first healthy probe (model loading, warmup)
    max_failed_starts: int = 3  # restart mode: starts in a row that never became healthy

    def __post_init__(self) -> None:
        if self.failures < 1 or self.max_failed_starts < 1:
            raise ValueError("failures and max_failed_starts must be at least 1")
        for name in ("interval_s", "timeout_s", "start_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.grace_s < 0 or (self.restart_grace_s or 0) < 0:
            raise ValueError("grace periods must be >= 0 seconds")


Launcher = Callable[[], "subprocess.Popen[Any]"]


def exposed_listeners(command: Sequence[str]) -> list[str]:
    """The server's HTTP and gRPC listeners bound beyond loopback (tritonserver's default address is 0.0.0.0).

    Requests there skip the TLS proxy's screening, which Triton 2.51 needs (docs/SECURITY.md): said at start.
    """
    flags = dict(arg[2:].split("=", 1) for arg in command[1:] if arg.startswith("--") and "=" in arg)
    exposed = []
    for protocol, default_port in (("http", "8000"), ("grpc", "8001")):
        address = flags.get(f"{protocol}-address", "0.0.0.0")
        if flags.get(f"allow-{protocol}", "true") != "false" and address not in ("127.0.0.1", "::1", "localhost"):
            exposed.append(f"{protocol.upper()} {address}:{flags.get(f'{protocol}-port', default_port)}")
    return exposed


def launch_command(command: Sequence[str]) -> Launcher:
    """Start `command` in its own process group, so a SIGKILL reaches its children (the backend stubs) too."""
    return lambda: subprocess.Popen(list(command), start_new_session=True)


class Supervisor:
    """Run a server child, probe it, stop it when unhealthy; restart it (``restart=True``) or exit 1.

    `restart_on` names reasons (RESTART_REASONS) restarted in place even without ``restart``; a start that
    never becomes healthy still exits. A first stop request (SIGTERM/SIGINT, or `request_stop`) is passed on to the server as SIGTERM and
    waited for up to ``grace_s``; a second one kills it at once.
    """

    def __init__(self, launch: Launcher, url: str, models: Sequence[str], policy: WatchPolicy, *,
                 restart: bool = False, on_healthy: Callable[[int], None] | None = None,
                 metrics: WatchdogMetrics | None = None, explicit: bool = False,
                 restart_on: Sequence[str] = ()) -> None:
        parse_address(url)
        unknown = sorted(set(restart_on) - set(RESTART_REASONS))
        if unknown:
            raise ValueError(f"cannot restart on {', '.join(unknown)}: the reasons are {', '.join(RESTART_REASONS)}")
        self.restart_on = frozenset(restart_on)
        self._launch, self.url, self.models, self.policy = launch, url, tuple(models), policy
        self.child: subprocess.Popen[Any] | None = None  # the server started last
        # Explicit model control: models come and go through the load/unload API, and so do their stubs.
        self.explicit = explicit
        self.restart, self._on_healthy = restart, on_healthy
        self.metrics = metrics if metrics is not None else WatchdogMetrics()
        self._stop, self._kill = threading.Event(), threading.Event()
        self.starts = 0
        self._groups: dict[int, bool] = {}  # child pid -> it leads its own process group (launch_command's)

    def request_stop(self) -> None:
        """Drain and stop; called again, kill now. Safe from a signal handler."""
        if self._stop.is_set():
            self._kill.set()
        self._stop.set()

    def install_signal_handlers(self) -> Callable[[], None]:
        """SIGTERM and SIGINT request a stop; returns what puts the previous handlers back."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self.request_stop()  # no logging here: the handler may interrupt a write to the same stream

        previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for signum, old in previous.items():
                signal.signal(signum, old)

        return restore

    def run(self) -> int:
        """Supervise until stopped (exit code of the drained server) or, without restart, until unhealthy."""
        failed_starts = 0
        while True:
            child = self.child = self._launch()
            self._groups[child.pid] = _leads_group(child)
            self.starts += 1
            self.metrics.count(start=True)
            reason = self._await_healthy(child)
            if self._stop.is_set():
                return self._stop_child(child, self.policy.grace_s)
            if reason is None:
                failed_starts = 0
                self.metrics.set_healthy(True)
                if self._on_healthy is not None:
                    self._on_healthy(self.starts)
                reason = self._watch(child)
                self.metrics.set_healthy(False)
                if self._stop.is_set():
                    return self._stop_child(child, self.policy.grace_s)
            else:
                failed_starts += 1
            self.metrics.count(restart=reason.kind)
            grace = self.policy.grace_s if self.policy.restart_grace_s is None else self.policy.restart_grace_s
            code = self._stop_child(child, grace)
            if failed_starts >= (self.policy.max_failed_starts if self.restart else 1):
                raise WatchdogError(f"Triton did not become healthy: {reason}")
            if not (self.restart or reason.kind in self.restart_on):
                logger.error("Triton is unhealthy (%s); stopped it (exit code %s)", reason, code)
                return EXIT_UNHEALTHY
            logger.warning("restarting Triton (start %d): %s", self.starts + 1, reason)

    def _await_healthy(self, child: subprocess.Popen[Any]) -> Unhealthy | None:
        """None once a probe passes; else why not (exited, or no passing probe within start_timeout_s)."""
        deadline = time.monotonic() + self.policy.start_timeout_s
        reason = "no probe yet"
        while not self._stop.is_set():
            if child.poll() is not None:
                return Unhealthy("start_failed", f"tritonserver exited with code {child.returncode} while starting")
            try:
                probe(self.url, self.models, min(self.policy.timeout_s, max(0.1, deadline - time.monotonic())))
                return None
            except ProbeError as exc:
                reason = str(exc)
            if time.monotonic() >= deadline:
                return Unhealthy("start_failed", f"not healthy {self.policy.start_timeout_s:g} s after start ({reason})")
            self._sleep(child, min(0.5, self.policy.interval_s))
        return Unhealthy(STOPPED, "stop requested")

    def _watch(self, child: subprocess.Popen[Any]) -> Unhealthy:
        """Watch until the server is judged unhealthy or exits; say why.

        Every second its Python-backend stubs are counted: one that exits never comes back, and the probe
        can take long to notice when the step has a second, live instance that answers most probes.
        Every `interval_s` a probe runs.
        """
        stubs = python_stubs(child.pid)
        suspects: dict[str, float] = {}  # explicit mode: lost stubs whose model still answers ready, since when
        recent: deque[bool] = deque(maxlen=2 * self.policy.failures - 1)  # True: the probe failed
        next_probe = time.monotonic() + self.policy.interval_s
        while True:
            self._sleep(child, min(STUB_CHECK_S, max(0.0, next_probe - time.monotonic())))
            if self._stop.is_set():
                return Unhealthy(STOPPED, "stop requested")
            if child.poll() is not None:
                return Unhealthy("server_exited", f"tritonserver exited with code {child.returncode}")
            current = python_stubs(child.pid)
            lost = sorted(name for pid, name in stubs.items() if pid not in current)
            if self.explicit:
                # A reload replaces an instance's stub: the same instance name under a new pid is no loss.
                lost = self._unexplained([n for n in lost if n not in current.values()], suspects)
                stubs = current  # stubs of models loaded since are watched too
            if lost and child.poll() is not None:  # the stubs went with their server
                return Unhealthy("server_exited", f"tritonserver exited with code {child.returncode}")
            if lost:
                return Unhealthy("stub_exited", f"the Python-backend stub of {', '.join(lost)} exited "
                                                "(Triton does not restart it)")
            if time.monotonic() < next_probe:
                continue
            next_probe = time.monotonic() + self.policy.interval_s
            try:
                probe(self.url, self.models, self.policy.timeout_s)
            except ProbeError as exc:
                recent.append(True)
                self.metrics.count(failed_probe=True)
                logger.warning("probe failed (%d of the last %d): %s", sum(recent), len(recent), exc)
                if exc.lasting:
                    return Unhealthy("dead_stub", f"a failure that does not heal: {exc}")
                if unhealthy(recent, self.policy.failures):
                    return Unhealthy("probe_failures",
                                     f"{sum(recent)} of the last {len(recent)} probes failed, the last: {exc}")
                continue
            if recent and recent[-1]:
                logger.info("probe passed again")
            recent.append(False)

    def _unexplained(self, lost: Sequence[str], suspects: dict[str, float]) -> list[str]:
        """Explicit mode: lost stubs not explained by an unload. Triton keeps a model ready while it unloads
        it, so a stub whose model still answers ready gets ``timeout_s`` to become an unload; ``suspects``
        carries them from check to check."""
        now = time.monotonic()
        for name in lost:
            suspects.setdefault(name, now)
        dead = []
        for name, since in list(suspects.items()):
            if not still_loaded(self.url, name, self.policy.timeout_s):
                del suspects[name]  # unloaded
            elif now - since >= self.policy.timeout_s:
                dead.append(name)
        return sorted(dead)

    def _sleep(self, child: subprocess.Popen[Any], seconds: float) -> None:
        """Wait, returning early on a stop request or when the child exits."""
        end = time.monotonic() + seconds
        while not self._stop.is_set() and child.poll() is None and (left := end - time.monotonic()) > 0:
            self._stop.wait(min(left, 0.1))

    def _stop_child(self, child: subprocess.Popen[Any], grace_s: float) -> int:
        """SIGTERM, wait up to `grace_s` (less on a second stop request), then SIGKILL its process group."""
        if child.poll() is None:
            logger.info("stopping tritonserver (SIGTERM, SIGKILL after %g s)", grace_s)
            child.send_signal(signal.SIGTERM)
            end = time.monotonic() + grace_s
            while child.poll() is None and time.monotonic() < end and not self._kill.is_set():
                self._kill.wait(0.1)
            if child.poll() is None:
                logger.warning("tritonserver still running after SIGTERM; killing it")
                _kill_group(child)
        code = child.wait()
        if self._groups.pop(child.pid, False):
            _kill_leftovers(child.pid)
        return 128 - code if code < 0 else code  # killed by signal N: the shell's 128 + N


def instance_model(instance: str) -> str:
    """The model of a stub's instance name: Triton names instances ``<model>_<group>_<index>``."""
    parts = instance.rsplit("_", 2)
    return parts[0] if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() else instance


def still_loaded(url: str, instance: str, timeout_s: float) -> bool:
    """Whether the model of a lost stub is still served: then the stub died; otherwise it was unloaded.

    A model whose stub died stays ready on Triton 2.51 (FIELD-NOTES), so "ready" means "lost a stub". When the
    server cannot say, the stub counts as lost: the probe and a restart sort it out.
    """
    try:
        status, _ = _request(parse_address(url), "GET", f"/v2/models/{instance_model(instance)}/ready", timeout_s)
    except ProbeError:
        return True
    return status == 200


def python_stubs(server_pid: int) -> dict[int, str]:
    """The live Python-backend stub processes of a tritonserver, by pid, with their model instance names.

    Read from /proc (Linux); elsewhere nothing is found and only the probe watches. A stub's command line
    ends with its instance name and the kind (``... yolo_preprocess_0_0 DEFAULT``).
    """
    stubs: dict[int, str] = {}
    try:
        processes = [entry for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return stubs
    for process in processes:
        try:
            state, parent = (process / "stat").read_bytes().rsplit(b")", 1)[1].split()[:2]
            if int(parent) != server_pid or state in (b"Z", b"X"):
                continue
            argv = (process / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if argv[0].endswith("triton_python_backend_stub"):
            # argv ends with "" after the instance name and kind
            stubs[int(process.name)] = argv[-3] if len(argv) > 3 else process.name
    return stubs


def unhealthy(recent: Sequence[bool], failures: int) -> bool:
    """`failures` failed probes among the last ``2 * failures - 1`` (True = failed).

    N failures in a row is the usual case. The window also catches a server that fails every other
    probe: one of two instances of a step has lost its stub, and half of all requests fail for good.
    """
    return sum(list(recent)[-(2 * failures - 1) :]) >= failures


def _leads_group(child: subprocess.Popen[Any]) -> bool:
    try:
        return os.getpgid(child.pid) == child.pid
    except (ProcessLookupError, AttributeError):
        return False


def _kill_leftovers(group: int) -> None:
    """What is left of a dead server's process group: backend stubs of a tritonserver that was killed outright
    linger, holding /dev/shm, until they notice. A group id is not reused while members hold it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _kill_group(child: subprocess.Popen[Any]) -> None:
    try:
        if os.getpgid(child.pid) == child.pid:
            os.killpg(child.pid, signal.SIGKILL)
            return
    except ProcessLookupError:
        return
    child.kill()


# --- the command line --------------------------------------------------------------------------------------


def gpu_series(supervisor: Supervisor) -> Callable[[], str] | None:
    """The GPUs' series beside the watchdog's (gpu_metrics.py, copied next to this file in the image or imported
    from the package), GPU memory labelled by model; None where that module or NVML is missing."""
    try:
        import gpu_metrics  # the image's copy beside this file
    except ImportError:
        try:
            from generator.server import gpu_metrics
        except ImportError:
            return None
    monitor = gpu_metrics.GpuMonitor()
    if not monitor.available:
        logger.info("no GPU metrics: %s", monitor.unavailable)
        return jetson_series()
    gpu_metrics.sample_in_background(monitor)

    def models() -> dict[int, str]:
        child = supervisor.child
        if child is None or child.poll() is not None:
            return {}
        return {child.pid: "tritonserver", **{pid: instance_model(n) for pid, n in python_stubs(child.pid).items()}}

    return lambda: str(monitor.render(models))


def jetson_series() -> Callable[[], str] | None:
    """A Jetson's own counters where NVML is absent (jetson_metrics.py: tegrastats, nvpmodel); None elsewhere."""
    try:
        import jetson_metrics  # the image's copy beside this file
    except ImportError:
        try:
            from generator.server import jetson_metrics
        except ImportError:
            return None
    try:
        monitor = jetson_metrics.JetsonMonitor()
    except jetson_metrics.JetsonUnavailable as exc:
        logger.info("no Jetson metrics: %s", exc)
        return None
    monitor.start()
    return monitor.render


def histogram_series(command: Sequence[str]) -> Callable[[], str] | None:
    """The ensemble's quality histograms, re-exported as histograms from the metrics endpoint of the server
    ``command`` starts (histogram_export.py, beside this file in the image or in the package); None without it."""
    try:
        import histogram_export  # the image's copy beside this file
    except ImportError:
        try:
            from generator.server import histogram_export
        except ImportError:
            return None
    port = histogram_export.metrics_port(list(command))
    if port is None:
        return None
    return lambda: str(histogram_export.histograms_of(port))


def _extra_series(*sources: Callable[[], str] | None) -> Callable[[], str] | None:
    present = [source for source in sources if source is not None]
    return (lambda: "".join(source() for source in present)) if present else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="watchdog.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    defaults = WatchPolicy()
    for name, help_text in (("probe", "probe once: exit 0 when healthy, 1 when not"),
                            ("supervise", "run a server command and stop it when unhealthy")):
        command = sub.add_parser(name, help=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        command.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP HOST:PORT")
        command.add_argument("--model", action="append", required=True,
                             help="ensemble to probe (repeat for several)")
        command.add_argument("--timeout-s", type=float, default=defaults.timeout_s, help="seconds per probe")
    supervise = sub.choices["supervise"]
    supervise.add_argument("--failures", type=int, default=defaults.failures,
                           help="failed probes (in a row, or among the last 2N-1) before the server is stopped")
    supervise.add_argument("--interval-s", type=float, default=defaults.interval_s, help="between probes")
    supervise.add_argument("--grace-s", type=float, default=defaults.grace_s, help="SIGTERM to SIGKILL")
    supervise.add_argument("--start-timeout-s", type=float, default=defaults.start_timeout_s,
                           help="start to first healthy probe")
    supervise.add_argument("--metrics-port", type=int, default=0,
                           help="serve the watchdog's Prometheus metrics on this port (0: off)")
    supervise.add_argument("--metrics-address", default="0.0.0.0", help="address of the metrics endpoint")
    supervise.add_argument("--state-file", type=Path,
                           help="keep the counters here across restarts of the watchdog (its container)")
    supervise.add_argument("--restart-on", default="",
                           help=f"comma-separated reasons to restart the server in place for instead of exiting "
                                f"({', '.join(RESTART_REASONS)})")
    supervise.add_argument("--restart-grace-s", type=float,
                           help="SIGTERM to SIGKILL of an unhealthy server (default: --grace-s)")
    supervise.add_argument("--explicit", action="store_true",
                           help="the server runs --model-control-mode=explicit: a stub gone with its model's unload "
                                "is no loss")
    supervise.add_argument("command", nargs=argparse.REMAINDER, help="-- tritonserver ARGS...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="watchdog: %(message)s", stream=sys.stderr)
    try:
        if args.action == "probe":
            probe(args.url, args.model, args.timeout_s)
            print(f"healthy: {', '.join(args.model)} answered at {args.url}")
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            raise WatchdogError("no server command: put it after --, e.g. -- tritonserver --model-repository=/models")
        policy = WatchPolicy(failures=args.failures, interval_s=args.interval_s, timeout_s=args.timeout_s,
                             grace_s=args.grace_s, restart_grace_s=args.restart_grace_s,
                             start_timeout_s=args.start_timeout_s)
        if Path(command[0]).name == "tritonserver" and exposed_listeners(command):
            logging.warning("Triton listens beyond loopback (%s): requests there skip the TLS proxy's screening "
                            "(docs/SECURITY.md); keep them closed to clients", ", ".join(exposed_listeners(command)))
        restart_on = [reason for reason in args.restart_on.split(",") if reason]
        metrics = WatchdogMetrics(args.state_file)
        supervisor = Supervisor(launch_command(command), args.url, args.model, policy, metrics=metrics,
                                restart_on=restart_on, explicit=args.explicit)
        if args.metrics_port:
            extra = _extra_series(gpu_series(supervisor),
                                  histogram_series(command) if Path(command[0]).name == "tritonserver" else None)
            serve_metrics(metrics, args.metrics_address, args.metrics_port, extra)
        supervisor.install_signal_handlers()
        return supervisor.run()
    except (ProbeError, WatchdogError, ValueError, OSError) as exc:
        print(f"unhealthy: {exc}" if args.action == "probe" else f"watchdog: {exc}", file=sys.stderr)
        return EXIT_UNHEALTHY


if __name__ == "__main__":
    sys.exit(main())
