"""docker-compose.yml and .env rules (the compose file as `docker compose config` would see it)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from deploy import commands, sizing
from deploy.policy.commands import (
    builder_command_violations,
    grace_seconds,
    probe_violations,
    release_violation,
    serve_command_violations,
)
from deploy.settings import BUILD_TARGETS, Settings, is_digest, is_pinned

SERVICES = {"pod", "proxy", "builder", "triton", "builder-cpu", "triton-cpu", "prometheus", "grafana",
            "locust-master", "locust-worker", "rollout", "rollout-cpu", "builder-jetson", "triton-jetson"}
# The rollout's one-shot containers: the builder's image, the Triton it drives.
ROLLOUT_SERVICES = {"rollout": ("builder", "triton"), "rollout-cpu": ("builder-cpu", "triton-cpu")}
TRITON_SERVICES = {"triton": "builder", "triton-cpu": "builder-cpu"}
PULLED_SERVICES = ("pod", "proxy", "prometheus", "grafana")
# The network namespace the proxy and Triton share (a pod's sandbox): it publishes the proxy's ports.
POD = "pod"
POD_NETWORK = f"service:{POD}"
PROFILES = {
    "pod": ("gpu", "cpu", "jetson"), "proxy": ("gpu", "cpu", "jetson"), "builder": ("gpu",), "triton": ("gpu",), "builder-cpu": ("cpu",),
    "triton-cpu": ("cpu",), "prometheus": ("monitoring",), "grafana": ("monitoring",),
    "locust-master": ("loadtest",), "locust-worker": ("loadtest",), "rollout": ("gpu-rollout",), "rollout-cpu": ("cpu-rollout",),
    "builder-jetson": ("jetson",), "triton-jetson": ("jetson",),  # their own rules: deploy/policy/jetson.py
}
RESTARTING = ("unless-stopped", "on-failure", "always")
# The NGC base digests have no default: compose must refuse to build without them.
REQUIRED_DIGESTS = ("TRITON_BASE_DIGEST", "TENSORRT_BASE_DIGEST")
PINNED_ENV = ("DEBIAN_IMAGE", "PYTHON_IMAGE", "NGINX_IMAGE", "PROMETHEUS_IMAGE", "GRAFANA_IMAGE")
GPU_SERVICES = ("builder", "triton")


def expected_ulimits(name: str, settings: Settings) -> dict[str, int]:
    """The GPU services get the GPU-host limits the settings ask for; the CPU stack none (a daemon that cannot
    raise memlock, rootless or capped, then still starts it)."""
    if name not in GPU_SERVICES:
        return {}
    limits = {"memlock": settings.gpu_ulimit_memlock, "stack": settings.gpu_ulimit_stack}
    return {key: value for key, value in limits.items() if value}


def _is_loopback(host_ip: str) -> bool:
    try:
        return ipaddress.ip_address(host_ip).is_loopback
    except ValueError:
        return False


def _service_hardening(name: str, svc: dict[str, Any], settings: Settings) -> list[str]:
    problems = []
    user = str(svc.get("user", ""))
    if not user or user.split(":")[0] in ("0", "root"):
        problems.append(f"service {name}: user must be set and non-root, got {user!r}")
    if svc.get("read_only") is not True:
        problems.append(f"service {name}: read_only must be true")
    if "ALL" not in (svc.get("cap_drop") or []) or svc.get("cap_add"):
        problems.append(f"service {name}: cap_drop must contain ALL and cap_add must be empty")
    if "no-new-privileges:true" not in (svc.get("security_opt") or []):
        problems.append(f"service {name}: security_opt must contain no-new-privileges:true")
    if svc.get("privileged") or svc.get("network_mode") == "host" or svc.get("ipc") == "host":
        problems.append(f"service {name}: privileged, host network and host IPC are not allowed")
    for port in svc.get("ports") or []:
        host_ip = str(port.get("host_ip", "")) if isinstance(port, dict) else ""
        if not isinstance(port, dict):
            problems.append(f"service {name}: port {port!r} must use the long syntax with host_ip")
        elif name == POD and host_ip != settings.proxy_bind_address:
            problems.append(f"service {POD}: published on {host_ip!r}, settings say {settings.proxy_bind_address!r}")
        elif name != POD and not _is_loopback(host_ip):
            problems.append(f"service {name}: port {port.get('target')} published on {host_ip!r}, not loopback")
    return problems


def _gpu_reserved(svc: dict[str, Any]) -> bool:
    devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    return any("gpu" in (d.get("capabilities") or []) for d in devices)


def _models_mounts(svc: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in svc.get("volumes") or [] if isinstance(v, dict) and v.get("target") == commands.MODELS_VOLUME]


def _triton_service(name: str, svc: dict[str, Any], settings: Settings) -> list[str]:
    where = f"service {name}"
    problems = serve_command_violations(svc.get("command") or [], settings, where, gpu=name == "triton")
    if "--allow-gpu-metrics=true" in (svc.get("command") or []) and name != "triton":
        problems.append(f"{where}: GPU metrics on a CPU-only service")
    if svc.get("network_mode") != POD_NETWORK or svc.get("ports"):
        problems.append(f"{where}: must join the pod's network namespace (network_mode {POD_NETWORK}), no ports")
    dep = (svc.get("depends_on") or {}).get(TRITON_SERVICES[name]) if isinstance(svc.get("depends_on"), dict) else None
    if not dep or dep.get("condition") != "service_completed_successfully":
        problems.append(f"{where}: depends_on {TRITON_SERVICES[name]} with condition service_completed_successfully")
    if svc.get("restart") not in RESTARTING:
        problems.append(f"{where}: restart must be one of {RESTARTING}: the watchdog exits non-zero to be restarted")
    grace = grace_seconds(svc.get("stop_grace_period", ""))
    if grace != commands.stop_timing(settings).container_grace_s:
        problems.append(f"{where}: stop_grace_period must be {commands.stop_timing(settings).container_grace_s}s "
                        f"(longer than the watchdog's drain), got {svc.get('stop_grace_period')!r}")
    need_mib = sizing.shm_size_bytes(settings, name == "triton") // sizing.MIB
    if str(svc.get("shm_size")) != f"{need_mib}m":
        problems.append(f"{where}: shm_size must be {need_mib}m (deploy/sizing.py), got {svc.get('shm_size')!r}")
    problems += _ulimit_violations(name, svc, settings)
    mounts = _models_mounts(svc)
    if len(mounts) != 1 or mounts[0].get("read_only") is not True:
        problems.append(f"{where}: {commands.MODELS_VOLUME} must be mounted once, read-only")
    if str((svc.get("environment") or {}).get("OPENCV_IO_MAX_IMAGE_PIXELS")) != str(settings.max_image_pixels):
        problems.append(f"{where}: OPENCV_IO_MAX_IMAGE_PIXELS must be {settings.max_image_pixels}")
    health = svc.get("healthcheck") or {}
    test = health.get("test") or []
    if health.get("disable") or not test:
        problems.append(f"{where}: healthcheck missing")
    else:
        problems += probe_violations(test[1:] if test[0] in ("CMD", "CMD-SHELL") else test, settings, where)
    if (name == "triton") != _gpu_reserved(svc):
        problems.append(f"{where}: GPU reservation must be on the GPU service only")
    return problems


def _ulimit_violations(name: str, svc: dict[str, Any], settings: Settings) -> list[str]:
    want = expected_ulimits(name, settings)
    if (svc.get("ulimits") or {}) != want:
        return [f"service {name}: ulimits must be {want} (settings gpu_ulimit_*; none on the CPU stack), "
                f"got {svc.get('ulimits')}"]
    return []


def _pod_service(svc: dict[str, Any], settings: Settings) -> list[str]:
    """The namespace owner: does nothing but exist, publishes exactly the proxy's ports, carries the alias."""
    problems = []
    if list(svc.get("entrypoint") or [])[:1] != ["sleep"] or svc.get("init") is not True:
        problems.append(f"service {POD}: must only sleep (entrypoint sleep, init true): it must never need a restart")
    if svc.get("restart") not in RESTARTING:
        problems.append(f"service {POD}: restart must be one of {RESTARTING}")
    published = sorted(int(p.get("target", 0)) for p in svc.get("ports") or [] if isinstance(p, dict))
    if published != sorted((settings.proxy_http_port, settings.proxy_grpc_port)):
        problems.append(f"service {POD}: must publish exactly the proxy ports, got {published}")
    aliases = ((svc.get("networks") or {}).get("default") or {}).get("aliases") or []
    if "triton" not in aliases:
        problems.append(f"service {POD}: needs the network alias triton (Prometheus and Locust dial it)")
    return problems


def _proxy_service(svc: dict[str, Any], settings: Settings) -> list[str]:
    problems = []
    if svc.get("network_mode") != POD_NETWORK or svc.get("ports"):
        problems.append(f"service proxy: must join the pod's network namespace (network_mode {POD_NETWORK}), "
                        "no ports of its own")
    test = (svc.get("healthcheck") or {}).get("test") or []
    if list(test[1:]) != commands.proxy_health_command(settings):
        problems.append(f"service proxy: the healthcheck must be {commands.proxy_health_command(settings)} "
                        "(Triton's readiness through nginx: it sees a broken path)")
    targets = {v.get("target"): v for v in svc.get("volumes") or [] if isinstance(v, dict)}
    for target in ("/etc/nginx/nginx.conf", "/etc/nginx/tls", commands.MODELS_VOLUME):
        if (targets.get(target) or {}).get("read_only") is not True:
            problems.append(f"service proxy: {target} must be mounted read-only")
    if str(svc.get("stop_signal")) != "SIGQUIT":
        problems.append("service proxy: stop_signal must be SIGQUIT (nginx's graceful stop)")
    if grace_seconds(svc.get("stop_grace_period", "")) != commands.stop_timing(settings).container_grace_s:
        problems.append("service proxy: stop_grace_period must match the Triton services'")
    return problems


def _rollout_service(name: str, svc: dict[str, Any], builder: dict[str, Any], triton: str,
                     settings: Settings) -> list[str]:
    """The rollout drives Triton's admin API from inside the pod (never through the proxy), with the token from
    the secret file, the builder's image and the models volume writable (the index, records, the split)."""
    where = f"service {name}"
    problems = []
    if list(svc.get("entrypoint") or []) != ["python3", "-m", "deploy.entrypoints.rollout_job", *commands.rollout_command(settings)]:
        problems.append(f"{where}: entrypoint must be python3 -m deploy.entrypoints.rollout_job {commands.rollout_command(settings)}")
    if svc.get("network_mode") != POD_NETWORK or svc.get("ports") or svc.get("networks"):
        problems.append(f"{where}: must join the pod's network namespace (network_mode {POD_NETWORK}), no ports")
    if svc.get("image") != builder.get("image") or "build" in svc:
        problems.append(f"{where}: must run the builder's image ({builder.get('image')}), not build its own")
    targets = [str(x.get("target")) for x in svc.get("secrets") or [] if isinstance(x, dict)]
    if [x.get("source") for x in svc.get("secrets") or [] if isinstance(x, dict)] != ["admin_token"] or \
            targets != [commands.ADMIN_TOKEN_FILE.rsplit("/", 1)[1]]:
        problems.append(f"{where}: needs exactly the admin_token secret at {commands.ADMIN_TOKEN_FILE}")
    mounts = _models_mounts(svc)
    if len(mounts) != 1 or mounts[0].get("read_only"):
        problems.append(f"{where}: {commands.MODELS_VOLUME} must be mounted once, writable")
    dep = (svc.get("depends_on") or {}).get(triton) if isinstance(svc.get("depends_on"), dict) else None
    if not dep or dep.get("condition") != "service_healthy" or svc.get("restart") not in ("no", None):
        problems.append(f"{where}: depends_on {triton} (service_healthy) and restart no: it is a one-shot")
    return problems


def _builder_service(name: str, svc: dict[str, Any], settings: Settings) -> list[str]:
    target = BUILD_TARGETS[name]
    problems = builder_command_violations(svc.get("command") or [], settings, target, f"service {name}")
    mounts = _models_mounts(svc)
    if len(mounts) != 1 or mounts[0].get("read_only"):
        problems.append(f"service {name}: {commands.MODELS_VOLUME} must be mounted once, writable")
    if (name == "builder") != _gpu_reserved(svc):
        problems.append(f"service {name}: GPU reservation must be on the GPU builder only")
    if svc.get("network_mode") != "none":
        problems.append(f"service {name}: network_mode must be none (the image holds all a build needs)")
    return problems + _ulimit_violations(name, svc, settings)


def compose_violations(compose: dict[str, Any], env: dict[str, str], settings: Settings) -> list[str]:
    """All compose rules; ``compose`` is interpolated with ``env`` (the committed .env)."""
    services: dict[str, Any] = compose.get("services") or {}
    problems: list[str] = []
    if set(services) != SERVICES:
        problems.append(f"services {sorted(services)} != {sorted(SERVICES)}")
    for name, svc in services.items():
        problems += _service_hardening(name, svc, settings)
        if tuple(svc.get("profiles") or ()) != PROFILES.get(name):
            problems.append(f"service {name}: profiles must be {list(PROFILES.get(name, ()))}")
        if name in PULLED_SERVICES and not is_pinned(str(svc.get("image", ""))):
            problems.append(f"service {name}: image {svc.get('image')!r} must be pinned as name:tag@sha256:<digest>")
        if name not in PULLED_SERVICES and name not in ROLLOUT_SERVICES and "build" not in svc:
            problems.append(f"service {name}: must be built from the pinned Dockerfiles")
    for name in TRITON_SERVICES:
        problems += _triton_service(name, services[name], settings) if name in services else []
    for name in BUILD_TARGETS:
        problems += _builder_service(name, services[name], settings) if name in services else []
    for name, (builder, triton) in ROLLOUT_SERVICES.items():
        if {name, builder} <= set(services):
            problems += _rollout_service(name, services[name], services[builder], triton, settings)
    if "proxy" in services:
        problems += _proxy_service(services["proxy"], settings)
    if POD in services:
        problems += _pod_service(services[POD], settings)
    return problems + env_violations(env)


def env_violations(env: dict[str, str]) -> list[str]:
    """The committed .env: release floor, pinned images, NGC digests empty or valid, secrets empty."""
    problems = release_violation(env.get("TRITON_RELEASE", ""), ".env TRITON_RELEASE")
    problems += [f".env: {key} {env.get(key)!r} must be pinned as name:tag@sha256:<digest>"
                 for key in PINNED_ENV if not is_pinned(env.get(key, ""))]
    problems += [f".env: {key} must be empty (required at deploy time) or sha256:<64 hex>"
                 for key in REQUIRED_DIGESTS if env.get(key, "") and not is_digest(env[key])]
    for secret in ("TRITON_ADMIN_TOKEN", "GRAFANA_ADMIN_PASSWORD"):
        if env.get(secret, "") != "":
            problems.append(f".env: {secret} must stay empty in the committed file (set it in the shell)")
    if not _is_loopback(env.get("BIND_ADDRESS", "")):
        problems.append(f".env: BIND_ADDRESS must be loopback, got {env.get('BIND_ADDRESS')!r}")
    return problems


def compose_text_violations(text: str) -> list[str]:
    """Before interpolation: the NGC base digests are required variables, so an unpinned build fails closed."""
    return [f"docker-compose.yml: {key} must be passed as ${{{key}:?...}} (required, no default)"
            for key in REQUIRED_DIGESTS if not re.search(r"\$\{" + key + r":\?", text)]
