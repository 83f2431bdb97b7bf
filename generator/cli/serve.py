"""``serve``: the embedded Triton in the foreground, hardened like deploy and restarted by the watchdog.

The admin API groups are restricted with the key from TRITON_ADMIN_TOKEN (or a printed random one), every
ensemble found in the repositories is probed with a real inference, and a server that fails
``--probe-failures`` probes (in a row, or among the last 2N-1: a hang, a crash loop), that has lost a
Python-backend stub (one failed probe says so), or that exits is restarted. Ctrl-C or
SIGTERM drains the requests in flight (``--drain-timeout-s``); a second one stops at once.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.request
from pathlib import Path
from typing import Any

from generator.errors import ServerError
from generator.server.embedded import TRITON_VERSION, EmbeddedServer
from generator.server.environments import STUB_ENVIRONMENTS, stub_environment_for
from generator.server.hardening import AdminAccess, admin_access
from generator.server.shutdown import EXIT_TIMEOUT_S
from generator.server.tracing import DEFAULT_RATE, TraceSettings, TraceSettingsError
from generator.server.watchdog import Supervisor, WatchdogError, WatchdogMetrics, WatchPolicy, serve_metrics
from generator.serving.contract import ADMIN_TOKEN_ENV, GRPC_HEADER_PREFIX

WATCHDOG_METRICS_PORT = 8003  # next to Triton's 8000-8002
_ENSEMBLE_RE = re.compile(r'^\s*platform\s*:\s*"ensemble"\s*$', re.MULTILINE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-repository", type=Path, action="append",
                        help="model repository (repeat to serve several; default: model_repository)")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--ready-timeout", type=float, default=180.0,
                        help="seconds from start to the first passing probe")
    parser.add_argument("--drain-timeout-s", type=int, default=EXIT_TIMEOUT_S,
                        help="on Ctrl-C/SIGTERM, seconds the requests in flight get to finish")
    parser.add_argument("--probe-interval-s", type=float, default=5.0, help="seconds between watchdog probes")
    parser.add_argument("--probe-failures", type=int, default=3, help="failed probes (in a row, or among the last 2N-1) before a restart")
    parser.add_argument("--probe-timeout-s", type=float, default=5.0, help="seconds one probe may take")
    parser.add_argument("--restart-grace-s", type=float, default=5.0,
                        help="seconds an unhealthy server gets after SIGTERM before it is killed and restarted")
    parser.add_argument("--watchdog-metrics-port", type=int, default=WATCHDOG_METRICS_PORT,
                        help="the watchdog's Prometheus metrics (restarts by reason, failed probes) on 127.0.0.1 "
                             "at this port; 0: off")
    parser.add_argument("--trace-otlp", metavar="URL",
                        help="send OpenTelemetry traces to this OTLP/HTTP receiver (e.g. http://127.0.0.1:4318/v1/traces); "
                             "requests carrying a W3C traceparent are always traced")
    parser.add_argument("--model-control", choices=("none", "explicit"), default="none",
                        help="none: serve everything in the repositories, fixed; explicit: start with each "
                             "repository's ensembles (a versioned repository: its alias only) and load or unload "
                             "models through the admin API, as `generator rollout` does")
    parser.add_argument("--trace-rate", type=int, default=DEFAULT_RATE,
                        help="with --trace-otlp: trace every N-th request that carries no trace context; "
                             "0: only requests that do")
    parser.add_argument("--stub-env", choices=["auto", *STUB_ENVIRONMENTS], default="auto",
                        help="the locked environment the Python-backend models run in (numpy 1.x, made under the "
                             "server cache on first use); auto: gpu when a Python model has KIND_GPU instances")
    parser.add_argument("--prepare", action="store_true",
                        help="only fetch the server and make the stub environment, then exit (for images, offline use)")


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
    from generator.builder.stages.versions import read_index

    names: list[str] = []
    for repository in repositories:
        index = read_index(repository)
        names += [index.name] if index is not None else find_ensembles([repository])
    return sorted(names)


def _model_names(server: EmbeddedServer) -> list[str]:
    headers = {server.admin.header: server.admin.token} if server.admin else {}
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}",
                                     method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=5) as response:
        return sorted(m["name"] for m in json.load(response) if m.get("state") == "READY")


def _announce(server: EmbeddedServer, admin: AdminAccess, start: int, watchdog_port: int) -> None:
    if start > 1:
        print(f"Triton restarted (start {start}) and serving again.", flush=True)
        return
    watchdog = f", watchdog metrics 127.0.0.1:{watchdog_port}" if watchdog_port else ""
    print(f"Triton {TRITON_VERSION} ready: HTTP {server.http_url}, gRPC {server.grpc_url}, "
          f"metrics {server.metrics_url}{watchdog}; models: {', '.join(_model_names(server))}", flush=True)
    where = f"header '{admin.header}', gRPC metadata '{GRPC_HEADER_PREFIX}{admin.header}'"
    if admin.generated:
        print(f"Admin APIs ({', '.join(admin.groups)}) are restricted; key ({where}): {admin.token}", flush=True)
        print(f"  (set {ADMIN_TOKEN_ENV} to choose the key)", flush=True)
    else:
        print(f"Admin APIs ({', '.join(admin.groups)}) are restricted to the key in {ADMIN_TOKEN_ENV} ({where}).",
              flush=True)
    print("Press Ctrl-C to stop.", flush=True)


def _watchdog_endpoint(metrics: WatchdogMetrics, port: int) -> Any:
    """The watchdog's metrics endpoint on loopback, or None with port 0."""
    if port == 0:
        return None
    try:
        return serve_metrics(metrics, "127.0.0.1", port)
    except OSError as exc:
        raise ServerError(f"cannot serve the watchdog metrics on 127.0.0.1:{port}: {exc.strerror or exc} "
                          "(choose another --watchdog-metrics-port, or 0 for none)") from None


def trace_args(args: argparse.Namespace) -> list[str]:
    """Triton's OpenTelemetry flags for ``--trace-otlp`` (none without it)."""
    if args.trace_otlp is None:
        if args.trace_rate != DEFAULT_RATE:
            raise ServerError("--trace-rate needs --trace-otlp URL (where the traces go)")
        return []
    try:
        return TraceSettings(args.trace_otlp, rate=args.trace_rate).server_args()
    except TraceSettingsError as exc:
        raise ServerError(str(exc)) from None


def _prepare(server: EmbeddedServer) -> int:
    install, stub = server.prepare()
    print(f"Triton {TRITON_VERSION} in {install.root}; {server.stub.name} environment in {stub.root} "
          f"(verified against {server.stub.lock.name})", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    repositories: list[Path] = args.model_repository or [Path("model_repository")]
    stub = stub_environment_for(repositories) if args.stub_env == "auto" else STUB_ENVIRONMENTS[args.stub_env]
    if args.prepare:
        return _prepare(EmbeddedServer(repositories[0], stub=stub))
    missing = [str(r) for r in repositories if not r.is_dir()]
    if missing:
        raise ServerError(f"model repository not found: {', '.join(missing)} (run python -m generator build first)")
    if not 1 <= args.drain_timeout_s <= 3600:
        raise ServerError(f"--drain-timeout-s must be 1..3600 seconds, got {args.drain_timeout_s}")
    admin = admin_access()
    explicit = args.model_control == "explicit"
    probed = startup_models(repositories) if explicit else find_ensembles(repositories)
    server = EmbeddedServer(
        repositories[0], args.http_port, args.grpc_port, args.metrics_port,
        extra_args=(*(f"--model-repository={r.resolve()}" for r in repositories[1:]), *trace_args(args),
                    # The latency quantiles per model and version that `generator rollout` compares.
                    *(["--metrics-config=summary_latencies=true"] if explicit else [])),
        admin=admin, exit_timeout_s=args.drain_timeout_s, load_models=tuple(probed) if explicit else None,
        stub=stub,
    )
    try:
        policy = WatchPolicy(failures=args.probe_failures, interval_s=args.probe_interval_s,
                             timeout_s=args.probe_timeout_s, start_timeout_s=args.ready_timeout,
                             grace_s=server.stop_timing.watchdog_grace_s, restart_grace_s=args.restart_grace_s)
    except ValueError as exc:
        raise ServerError(f"watchdog settings: {exc}") from None
    metrics = WatchdogMetrics()
    endpoint = _watchdog_endpoint(metrics, args.watchdog_metrics_port)
    supervisor = Supervisor(server.launch, server.http_url, probed, policy, restart=True,
                            on_healthy=lambda start: _announce(server, admin, start, args.watchdog_metrics_port),
                            metrics=metrics, explicit=explicit)
    restore = supervisor.install_signal_handlers()
    try:
        code = supervisor.run()
    except WatchdogError as exc:
        raise ServerError(f"{exc} (the server log is above)") from None
    finally:
        restore()
        server.stop()
        if endpoint is not None:
            endpoint.shutdown()
    print(f"Triton stopped (exit code {code}).", flush=True)
    return 0
