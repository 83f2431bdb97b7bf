"""Start the embedded Triton for ``generator serve`` and keep it serving: hardened, probed, restarted, drained.

The admin API groups are restricted with the key from TRITON_ADMIN_TOKEN (or a random one), every ensemble found
in the repositories is probed with a real inference (with ``--model-control explicit``: what starts loaded, a
versioned repository's alias), and the watchdog (generator/server/watchdog.py) restarts a server that fails its
probes, has lost a Python-backend stub or exits. ``generator.cli.serve`` turns flags into :class:`ServeSettings` and
prints what happens; this module does it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.errors import ServerError
from generator.operate.admin import ModelControl
from generator.repository.versions import read_index
from generator.server.embedded import EmbeddedServer
from generator.server.environments import LockedEnvironment
from generator.server.gpu_metrics import GpuMonitor, sample_in_background
from generator.server.hardening import AdminAccess, admin_access
from generator.server.histogram_export import histograms_of
from generator.server.shutdown import EXIT_TIMEOUT_S
from generator.server.tracing import DEFAULT_RATE, TraceSettings, TraceSettingsError
from generator.server.watchdog import (
    Supervisor,
    WatchdogError,
    WatchdogMetrics,
    WatchPolicy,
    instance_model,
    python_stubs,
    serve_metrics,
)

logger = logging.getLogger(__name__)
_ENSEMBLE_RE = re.compile(r'^\s*platform\s*:\s*"ensemble"\s*$', re.MULTILINE)


def find_ensembles(repositories: list[Path]) -> list[str]:
    """Names of the ensembles (``platform: "ensemble"``) in the repositories: what the watchdog probes."""
    return sorted(
        config.parent.name
        for repository in repositories
        for config in repository.glob("*/config.pbtxt")
        if _ENSEMBLE_RE.search(config.read_text(errors="replace"))
    )


def startup_models(repositories: list[Path]) -> list[str]:
    """What ``--model-control explicit`` loads at start: a versioned repository's alias (its stable version
    comes with it), every ensemble of a classic one. Each brings its composing models."""
    names: list[str] = []
    for repository in repositories:
        index = read_index(repository)
        names += [index.name] if index is not None else find_ensembles([repository])
    return sorted(names)


def trace_flags(otlp_url: str | None, rate: int) -> list[str]:
    """Triton's OpenTelemetry flags for ``--trace-otlp`` (none without it)."""
    if otlp_url is None:
        if rate != DEFAULT_RATE:
            raise ServerError("--trace-rate needs --trace-otlp URL (where the traces go)")
        return []
    try:
        return TraceSettings(otlp_url, rate=rate).server_args()
    except TraceSettingsError as exc:
        raise ServerError(str(exc)) from None


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``generator serve`` was asked for (its flags, checked)."""

    repositories: list[Path]
    stub: LockedEnvironment
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    policy: WatchPolicy = field(default_factory=WatchPolicy)
    drain_timeout_s: int = EXIT_TIMEOUT_S
    watchdog_metrics_port: int | None = 0  # 0: no watchdog metrics endpoint; None: derived (watchdog_port)
    trace: tuple[str, ...] = ()  # Triton's trace flags (trace_flags)
    explicit: bool = False  # --model-control explicit
    cuda_pool: tuple[str, ...] = ()  # Triton's CUDA memory pool flags (cuda_pool.serve_pool_args)

    def __post_init__(self) -> None:
        missing = [str(r) for r in self.repositories if not r.is_dir()]
        if missing:
            raise ServerError(f"model repository not found: {', '.join(missing)} (run python -m generator build "
                              "first)")
        if not 1 <= self.drain_timeout_s <= 3600:
            raise ServerError(f"--drain-timeout-s must be 1..3600 seconds, got {self.drain_timeout_s}")


def served_models(server: EmbeddedServer) -> list[str]:
    """The models the server has loaded, asked through its admin API."""
    key = server.admin.token if server.admin else None
    return sorted(ModelControl(server.http_url, server.metrics_url, key).loaded(timeout_s=5))


# Called when the server passes its first probe after a start (1 = the first start), with the admin access and
# the port the watchdog's metrics are served on (0: none).
OnReady = Callable[[EmbeddedServer, AdminAccess, int, int], None]


def make_server(settings: ServeSettings, admin: AdminAccess, probed: list[str]) -> EmbeddedServer:
    first, *more = settings.repositories
    return EmbeddedServer(
        first, settings.http_port, settings.grpc_port, settings.metrics_port,
        extra_args=(*(f"--model-repository={r.resolve()}" for r in more), *settings.trace, *settings.cuda_pool,
                    # The latency quantiles per model and version that `generator rollout` compares.
                    *(["--metrics-config=summary_latencies=true"] if settings.explicit else [])),
        admin=admin, exit_timeout_s=settings.drain_timeout_s,
        load_models=tuple(probed) if settings.explicit else None, stub=settings.stub,
    )


def serve(settings: ServeSettings, on_ready: OnReady) -> int:
    """Run the server in the foreground under the watchdog until Ctrl-C/SIGTERM; the server's last exit code."""
    admin = admin_access()
    probed = startup_models(settings.repositories) if settings.explicit else find_ensembles(settings.repositories)
    server = make_server(settings, admin, probed)
    # The watchdog waits as long for a stopping server as the server's own drain takes (shutdown.py).
    policy = dataclasses.replace(settings.policy, grace_s=server.stop_timing.watchdog_grace_s)
    metrics = WatchdogMetrics()
    endpoint = _watchdog_endpoint(metrics, settings, watchdog_series(server) if settings.watchdog_metrics_port != 0 else None)
    port = int(endpoint.server_address[1]) if endpoint is not None else 0
    supervisor = Supervisor(server.launch, server.http_url, probed, policy, restart=True,
                            on_healthy=lambda start: on_ready(server, admin, start, port),
                            metrics=metrics, explicit=settings.explicit)
    restore = supervisor.install_signal_handlers()
    try:
        return supervisor.run()
    except WatchdogError as exc:
        raise ServerError(f"{exc} (the server log is above)") from None
    finally:
        restore()
        server.stop()
        if endpoint is not None:
            endpoint.shutdown()


def gpu_series(server: EmbeddedServer) -> Callable[[], str]:
    """The GPUs' series (absent without NVML), GPU memory labelled with the model of each of Triton's processes."""
    monitor = GpuMonitor()
    if not monitor.available:
        logger.info("no GPU metrics: %s", monitor.unavailable)
        return lambda: ""
    sample_in_background(monitor)

    def models() -> dict[int, str]:
        process = server.process
        if process is None or process.poll() is not None:
            return {}
        stubs = python_stubs(process.pid)
        return {process.pid: "tritonserver", **{pid: instance_model(name) for pid, name in stubs.items()}}

    return lambda: monitor.render(models)


def watchdog_series(server: EmbeddedServer) -> Callable[[], str]:
    """What the watchdog's endpoint adds: the GPUs' series and the ensemble's quality histograms, re-exported as
    histograms from Triton's metrics (histogram_export.py: Triton holds their parts as counters)."""
    gpus = gpu_series(server)
    return lambda: gpus() + histograms_of(server.metrics_port)


def _watchdog_endpoint(metrics: WatchdogMetrics, settings: ServeSettings,
                       extra: Callable[[], str] | None = None) -> Any:
    """The watchdog's metrics endpoint on loopback (with the GPUs' series), or None with port 0. A derived port
    (None) is --metrics-port + 1, or any free one when that is taken: a second server on the machine, started
    with its own Triton ports, then does not fail on the first one's watchdog port."""
    port = settings.watchdog_metrics_port
    if port == 0:
        return None
    if port is None:
        taken = {settings.http_port, settings.grpc_port, settings.metrics_port}
        derived = settings.metrics_port + 1
        if derived not in taken and derived < 65536:
            with contextlib.suppress(OSError):
                return serve_metrics(metrics, "127.0.0.1", derived, extra)
        endpoint = serve_metrics(metrics, "127.0.0.1", 0, extra)
        logger.info("watchdog metrics on 127.0.0.1:%d (%d is taken)", endpoint.server_address[1], derived)
        return endpoint
    try:
        return serve_metrics(metrics, "127.0.0.1", port, extra)
    except OSError as exc:
        raise ServerError(f"cannot serve the watchdog metrics on 127.0.0.1:{port}: {exc.strerror or exc} "
                          "(choose another --watchdog-metrics-port, leave it out for a free one, or 0 for none)"
                          ) from None
