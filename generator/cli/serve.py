"""``serve``: the embedded Triton in the foreground, hardened like deploy and restarted by the watchdog.

The admin API groups are restricted with the key from TRITON_ADMIN_TOKEN (or a printed random one), every
ensemble found in the repositories is probed with a real inference, and a server that fails
``--probe-failures`` probes (in a row, or among the last 2N-1: a hang, a crash loop), that has lost a
Python-backend stub (one failed probe says so), or that exits is restarted. Ctrl-C or
SIGTERM drains the requests in flight (``--drain-timeout-s``); a second one stops at once. The start-up and the
supervision are generator/operate/serve.py; this module turns flags into its settings and prints what happens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from generator.errors import ServerError
from generator.server.cuda_pool import DEFAULT_MIB, TRITON_DEFAULT_MIB, serve_pool_args
from generator.server.embedded import TRITON_VERSION, EmbeddedServer
from generator.server.environments import STUB_ENVIRONMENTS, LockedEnvironment, stub_environment_for
from generator.server.hardening import AdminAccess
from generator.server.shutdown import EXIT_TIMEOUT_S
from generator.server.tracing import DEFAULT_RATE
from generator.server.watchdog import WatchPolicy
from generator.serving.contract import ADMIN_TOKEN_ENV, GRPC_HEADER_PREFIX


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
    parser.add_argument("--watchdog-metrics-port", type=int, default=None,
                        help="the watchdog's Prometheus metrics (restarts by reason, failed probes) and the GPUs' "
                             "(NVML: utilisation, memory, power, energy, temperature, clocks, throttling) on "
                             "127.0.0.1 at this port (default: --metrics-port + 1, 8003 with the default ports, or "
                             "a free port when that one is taken; printed when ready); 0: off")
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
    parser.add_argument("--cuda-pool-mib", type=int, default=None, metavar="MIB",
                        help="Triton's CUDA memory pool per GPU, where a GPU preprocess's images wait for the "
                             f"detector (default: {DEFAULT_MIB} when a Python model has KIND_GPU instances; 0: "
                             f"Triton's own {TRITON_DEFAULT_MIB} MiB, which overflows under load: images that miss "
                             "it are logged as failed GPU hand-offs while their requests still succeed)")
    parser.add_argument("--prepare", action="store_true",
                        help="only fetch the server and make the stub environment, then exit (for images, offline use)")
    parser.add_argument("--from-archive", type=Path, metavar="FILE",
                        help="with --prepare, on a machine with no package index: install the server, the stub "
                             "environments (and the schema environment and the project runtime, if carried) from an "
                             "archive of python -m generator archive (the file, or any of its parts), verifying every "
                             "hash first")


def _announce(server: EmbeddedServer, admin: AdminAccess, start: int, watchdog_port: int) -> None:
    if start > 1:
        print(f"Triton restarted (start {start}) and serving again.", flush=True)
        return
    watchdog = f", watchdog metrics 127.0.0.1:{watchdog_port}" if watchdog_port else ""
    print(f"Triton {TRITON_VERSION} ready: HTTP {server.http_url}, gRPC {server.grpc_url}, "
          f"metrics {server.metrics_url}{watchdog}; models: {', '.join(_served_models(server))}", flush=True)
    where = f"header '{admin.header}', gRPC metadata '{GRPC_HEADER_PREFIX}{admin.header}'"
    if admin.generated:
        print(f"Admin APIs ({', '.join(admin.groups)}) are restricted; token ({where}): {admin.token}", flush=True)
        print(f"  (set {ADMIN_TOKEN_ENV} to choose the token)", flush=True)
    else:
        print(f"Admin APIs ({', '.join(admin.groups)}) are restricted to the token in {ADMIN_TOKEN_ENV} ({where}).",
              flush=True)
    print("Press Ctrl-C to stop.", flush=True)


def _served_models(server: EmbeddedServer) -> list[str]:
    from generator.operate.serve import served_models

    return served_models(server)


def trace_args(args: argparse.Namespace) -> list[str]:
    """Triton's OpenTelemetry flags for ``--trace-otlp`` (none without it)."""
    from generator.operate.serve import trace_flags

    return trace_flags(args.trace_otlp, args.trace_rate)


def pool_args(args: argparse.Namespace, repositories: list[Path]) -> list[str]:
    """Triton's CUDA memory pool flags for ``--cuda-pool-mib`` (none where no Python step runs on the GPU)."""
    if args.cuda_pool_mib is not None and args.cuda_pool_mib < 0:
        raise ServerError(f"--cuda-pool-mib cannot be negative, got {args.cuda_pool_mib}")
    return serve_pool_args(repositories, args.cuda_pool_mib)


def _prepare(stub: LockedEnvironment, repository: Path) -> int:
    server = EmbeddedServer(repository, stub=stub)
    install, environment = server.prepare()
    print(f"Triton {TRITON_VERSION} in {install.root}; {stub.name} environment in {environment.root} "
          f"(verified against {stub.lock.name})", flush=True)
    return 0


def _prepare_offline(args: argparse.Namespace) -> int:
    from generator.cache import cache_root
    from generator.server.offline import install_archive

    if not args.prepare:
        raise ServerError("--from-archive installs ahead of serving: use it with --prepare")
    installed = install_archive(args.from_archive, cache_root(), None if args.stub_env == "auto" else args.stub_env)
    stubs = "; ".join(f"{name} environment in {env.root} (verified against {name}.txt)"
                      for name, env in installed.stubs.items())
    print(f"Triton {TRITON_VERSION} in {installed.server.root}; {stubs}; installed with no package index", flush=True)
    if installed.schema is not None:
        print(f"perf-analyzer environment (Triton {TRITON_VERSION}'s config schema for builds) in "
              f"{installed.schema.root}", flush=True)
    if installed.runtime is not None:
        print(f"Project runtime: {installed.runtime.python} (run python -m generator, loadtest and clients with it)",
              flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.from_archive is not None:
        return _prepare_offline(args)
    repositories: list[Path] = args.model_repository or [Path("model_repository")]
    stub = stub_environment_for(repositories) if args.stub_env == "auto" else STUB_ENVIRONMENTS[args.stub_env]
    if args.prepare:
        return _prepare(stub, repositories[0])
    try:
        policy = WatchPolicy(failures=args.probe_failures, interval_s=args.probe_interval_s,
                             timeout_s=args.probe_timeout_s, start_timeout_s=args.ready_timeout,
                             restart_grace_s=args.restart_grace_s)
    except ValueError as exc:
        raise ServerError(f"watchdog settings: {exc}") from None
    # Imported here: --prepare (--from-archive) runs on a bare offline Python with the standard library alone.
    from generator.operate.serve import ServeSettings, serve

    settings = ServeSettings(repositories, stub, args.http_port, args.grpc_port, args.metrics_port, policy,
                             args.drain_timeout_s, args.watchdog_metrics_port, tuple(trace_args(args)),
                             explicit=args.model_control == "explicit",
                             cuda_pool=tuple(pool_args(args, repositories)))
    code = serve(settings, _announce)
    print(f"Triton stopped (exit code {code}).", flush=True)
    return 0
