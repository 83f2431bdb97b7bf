"""Rules for the command lines compose and Kubernetes run: tritonserver, its entry point, probes, builds."""

from __future__ import annotations

from collections.abc import Sequence

from deploy import commands, sizing
from deploy.errors import SettingsError
from deploy.settings import (
    ADMIN_API_GROUPS,
    DETECTOR_ONNX_PATH,
    MIN_TRITON_RELEASE,
    Settings,
    build_options,
    release_tuple,
)
from generator.builder.spec.declarations import declared, from_argv, to_record
from generator.builder.spec.options import BuildOptions, SpecError, Target

# Explicit model control (was `none` until versions reached the deployed stack): Triton loads exactly the alias
# named by --load-model at start, so a candidate in the volume is never served until a rollout loads it, and the
# admin API that loads and unloads stays restricted behind the token (below) and off the proxy for the rollout.
REQUIRED_TRITON_FLAGS = (
    "--model-control-mode=explicit",
    "--disable-auto-complete-config",
    "--strict-readiness=true",
    "--exit-on-error=true",
    "--allow-sagemaker=false",
    "--allow-vertex-ai=false",
    "--metrics-config=summary_latencies=true",
    # Behind the proxy: gRPC exists only on the loopback of the proxy's network namespace / pod (HTTP too in
    # compose; on Kubernetes HTTP listens on the pod's address for the rollout Job: triton_flag_violations).
    f"--grpc-address={commands.LOOPBACK}",
)


def flag_values(args: Sequence[str], flag: str) -> list[str]:
    """Values of ``flag=value`` and ``flag value`` arguments."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    values += [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
    return values


def _one(args: Sequence[str], flag: str, want: str, where: str) -> list[str]:
    got = flag_values(args, flag)
    return [] if got == [want] else [f"{where}: {flag} must be {want}, got {got}"]


def release_violation(release: str, where: str) -> list[str]:
    try:
        if release_tuple(release) >= release_tuple(MIN_TRITON_RELEASE):
            return []
    except SettingsError as exc:
        return [f"{where}: {exc}"]
    return [f"{where}: Triton release {release} is older than {MIN_TRITON_RELEASE} (2025 security fixes)"]


def triton_flag_violations(args: Sequence[str], settings: Settings, where: str, *, gpu: bool = True,
                           http_address: str = commands.LOOPBACK) -> list[str]:
    """Server flags: control mode, readiness, loopback, size cap, drain, cloud endpoints off, admin APIs.

    The size cap is the NGC server's (``gpu``); the CPU image's Triton 2.51 has none (2.59+) and relies on the proxy.
    """
    problems = [f"{where}: missing {flag}" for flag in REQUIRED_TRITON_FLAGS if flag not in args]
    if list(args[:1]) != ["tritonserver"]:
        problems.append(f"{where}: the server command must start with tritonserver, got {list(args[:1])}")
    want_cap = [str(sizing.max_request_bytes(settings))] if gpu else []
    if flag_values(args, "--http-max-input-size") != want_cap:
        problems.append(f"{where}: --http-max-input-size must be {want_cap} (none on Triton 2.51), "
                        f"got {flag_values(args, '--http-max-input-size')}")
    problems += _one(args, "--http-address", http_address, where)
    problems += _one(args, "--model-repository", commands.MODEL_REPOSITORY, where)
    problems += _one(args, "--load-model", settings.model_name, where)
    problems += _one(args, "--exit-timeout-secs", str(commands.stop_timing(settings).exit_timeout_s), where)
    problems += _one(args, "--http-port", str(settings.http_port), where)
    problems += _one(args, "--grpc-port", str(settings.grpc_port), where)
    problems += _one(args, "--metrics-port", str(settings.metrics_port), where)
    for flag, proto in (("--http-restricted-api", "HTTP"), ("--grpc-restricted-protocol", "gRPC")):
        values = flag_values(args, flag)
        if len(values) != 1:
            problems.append(f"{where}: need exactly one {flag} ({proto} admin APIs), got {len(values)}")
            continue
        groups, _, key_value = values[0].partition(":")
        key, _, token = key_value.partition("=")
        if set(groups.split(",")) != set(ADMIN_API_GROUPS):
            problems.append(f"{where}: {flag} restricts {groups!r}, must be {','.join(ADMIN_API_GROUPS)}")
        if key != settings.admin_header or not token.strip():
            problems.append(f"{where}: {flag} must end with :{settings.admin_header}=<token>, got {values[0]!r}")
    return problems


def serve_command_violations(command: Sequence[str], settings: Settings, where: str, *, gpu: bool,
                             http_address: str = commands.LOOPBACK) -> list[str]:
    """The Triton container checks the repository, then runs tritonserver under the watchdog."""
    args = list(command)
    if args[:3] != ["python3", "-m", "deploy.entrypoints.serve_models"] or "--" not in args:
        return [f"{where}: the command must be `python3 -m deploy.entrypoints.serve_models ... -- tritonserver ...`, got {args[:3]}"]
    split = args.index("--")
    head, server = args[:split], args[split + 1:]
    timing = commands.stop_timing(settings)
    problems = triton_flag_violations(server, settings, where, gpu=gpu, http_address=http_address)
    pools = flag_values(server, "--cuda-memory-pool-byte-size")
    want_pools = [a.split("=", 1)[1] for a in commands.cuda_pool_args(settings)] if gpu else []
    if pools != want_pools:
        problems.append(f"{where}: --cuda-memory-pool-byte-size must be {want_pools} (GPU preprocess), got {pools}")
    for flag, want in (
        ("--repository", commands.MODEL_REPOSITORY),
        ("--watchdog", commands.WATCHDOG_PATH),
        ("--url", f"{commands.LOOPBACK}:{settings.http_port}"),
        ("--model", settings.model_name),
        ("--failures", str(settings.probe_failures)),
        ("--grace-s", str(timing.watchdog_grace_s)),
        # A lost stub: a fresh tritonserver in place; anything else exits for the restart policy.
        ("--restart-on", ",".join(commands.RESTART_IN_PLACE)),
    ):
        problems += _one(head, flag, want, f"{where} (watchdog)")
    return problems


def probe_violations(command: Sequence[str], settings: Settings, where: str) -> list[str]:
    """Probes run the watchdog's probe: readiness plus one real inference at priority 1, never less."""
    args = list(command)
    if args[:3] != ["python3", commands.WATCHDOG_PATH, "probe"]:
        return [f"{where}: must run `python3 {commands.WATCHDOG_PATH} probe`, got {args[:3]}"]
    return _one(args, "--model", settings.model_name, where) + _one(
        args, "--url", f"{commands.LOOPBACK}:{settings.http_port}", where
    )


def builder_command_violations(command: Sequence[str], settings: Settings, target: Target, where: str) -> list[str]:
    """The builder fills the volume through deploy/entrypoints/build_models.py with exactly the build the settings describe.

    The build flags are read back through the generator's own option declarations and compared option by
    option with ``build_options(settings, target)``: a file edited by hand, or rendered from other settings,
    fails here (the proxy body limit and /dev/shm are sized from those settings).
    """
    args = list(command)
    problems = _one(args, "--volume", commands.MODELS_VOLUME, where) + _one(args, "--link", commands.CURRENT_LINK, where)
    head = args[:args.index("--")] if "--" in args else args
    if "--versioned" not in head:
        problems.append(f"{where}: the builder must add versions (--versioned), never replace what Triton serves")
    build = args[args.index("--") + 1:] if "--" in args else []
    if any(a in ("--output", "--force") or a.startswith("--output=") for a in build):
        problems.append(f"{where}: --output/--force must not be given; build_models writes build-<key> in the volume")
        return problems
    problems += _one(build, "--onnx", DETECTOR_ONNX_PATH, where)
    flags = build[:build.index("--onnx")] + build[build.index("--onnx") + 2:] if "--onnx" in build else build
    try:
        found = to_record(from_argv(BuildOptions, flags, SpecError))
    except SpecError as exc:
        return [*problems, f"{where}: the build flags are not a valid generator build: {exc}"]
    expected = to_record(build_options(settings, target))
    flag = {".".join(item.path): item.declaration.flag for item in declared(BuildOptions)}
    problems += [f"{where}: {flag[path]} is {found[path]!r}, the settings say {expected[path]!r}"
                 for path in expected if found[path] != expected[path]]
    return problems


def grace_seconds(value: object) -> int | None:
    """``45s``, ``1m30s`` or a number of seconds; None when unreadable."""
    text = str(value).strip()
    total, number = 0, ""
    for char in text:
        if char.isdigit():
            number += char
        elif char in "hms" and number:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[char]
            number = ""
        else:
            return None
    return total + int(number) if number else total if text else None
