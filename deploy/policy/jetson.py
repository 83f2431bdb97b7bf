"""The Jetson profile's rules (deploy/jetson.py): the iGPU base pinned by tag and digest, the NVIDIA container
runtime instead of a device reservation, the plan built on the device with the Jetson's static build, the L4T
release in the build key, Triton wired like the other stacks (pod namespace, read-only volume, probe, /dev/shm)."""

from __future__ import annotations

import re
from typing import Any

from deploy import commands, jetson
from deploy.policy.commands import (
    grace_seconds,
    probe_violations,
    release_violation,
    serve_command_violations,
)
from deploy.policy.images import dockerfile_violations
from deploy.settings import Settings, is_digest

SERVICES = ("builder-jetson", "triton-jetson")
DOCKERFILES = ("triton-jetson", "builder-jetson")
DIGEST_ARG = "JETSON_TRITON_DIGEST"
_FROM = f"FROM {jetson.BASE_REPOSITORY}:${{JETSON_RELEASE}}-py3-igpu@${{{DIGEST_ARG}}}"


def _mounts(svc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(v.get("target")): v for v in svc.get("volumes") or [] if isinstance(v, dict)}


def _common(name: str, svc: dict[str, Any]) -> list[str]:
    problems = []
    if svc.get("runtime") != "nvidia":
        problems.append(f"service {name}: runtime must be nvidia (Jetson's iGPU comes through the NVIDIA runtime)")
    if (svc.get("deploy") or {}).get("resources"):
        problems.append(f"service {name}: no device reservation: --gpus is not supported on Jetson")
    if svc.get("profiles") != ["jetson"]:
        problems.append(f"service {name}: profiles must be ['jetson']")
    return problems


def _builder(svc: dict[str, Any], settings: Settings) -> list[str]:
    problems = _common("builder-jetson", svc)
    if list(svc.get("command") or []) != jetson.builder_command(settings):
        problems.append(f"service builder-jetson: command must be {jetson.builder_command(settings)} (deploy/jetson.py)")
    if svc.get("network_mode") != "none":
        problems.append("service builder-jetson: network_mode must be none (the image holds all a build needs)")
    mounts = _mounts(svc)
    if (mounts.get(commands.MODELS_VOLUME) or {}).get("read_only", False):
        problems.append(f"service builder-jetson: {commands.MODELS_VOLUME} must be mounted writable")
    l4t = mounts.get(jetson.L4T_MOUNT) or {}
    if l4t.get("source") != jetson.HOST_L4T_FILE or l4t.get("read_only") is not True:
        problems.append(f"service builder-jetson: {jetson.HOST_L4T_FILE} must be mounted read-only at {jetson.L4T_MOUNT}")
    return problems


def _triton(svc: dict[str, Any], settings: Settings, token: str) -> list[str]:
    where = "service triton-jetson"
    problems = _common("triton-jetson", svc)
    command = list(svc.get("command") or [])
    problems += serve_command_violations(command, settings, where, gpu=True)
    if command != jetson.serve_command(settings, token):
        problems.append(f"{where}: command must be deploy/jetson.py's serve_command")
    dep = (svc.get("depends_on") or {}).get("builder-jetson") or {}
    if dep.get("condition") != "service_completed_successfully" or svc.get("network_mode") != "service:pod":
        problems.append(f"{where}: joins the pod's namespace after builder-jetson completed successfully")
    if svc.get("restart") != "unless-stopped" or svc.get("ports"):
        problems.append(f"{where}: restart unless-stopped, no ports of its own")
    if grace_seconds(svc.get("stop_grace_period", "")) != commands.stop_timing(settings).container_grace_s:
        problems.append(f"{where}: stop_grace_period must match the other Triton services'")
    if str(svc.get("shm_size")) != f"{jetson.shm(settings).total_mib}m":
        problems.append(f"{where}: shm_size must be {jetson.shm(settings).total_mib}m (the Jetson build's batch)")
    mounts = _mounts(svc)
    if (mounts.get(commands.MODELS_VOLUME) or {}).get("read_only") is not True:
        problems.append(f"{where}: {commands.MODELS_VOLUME} must be mounted read-only")
    if any(v.get("read_only") is not True for v in mounts.values()):
        problems.append(f"{where}: every mount must be read-only")
    test = (svc.get("healthcheck") or {}).get("test") or []
    problems += probe_violations(test[1:], settings, where) if test else [f"{where}: healthcheck missing"]
    return problems


def compose_violations(compose: dict[str, Any], env: dict[str, str], settings: Settings, token: str) -> list[str]:
    """The Jetson services of the interpolated compose file and the .env values they read."""
    services = compose.get("services") or {}
    missing = [name for name in SERVICES if name not in services]
    if missing:
        return [f"docker-compose.yml: no {', '.join(missing)} service (the jetson profile)"]
    problems = _builder(services["builder-jetson"], settings) + _triton(services["triton-jetson"], settings, token)
    problems += release_violation(env.get("JETSON_RELEASE", ""), ".env JETSON_RELEASE")
    if env.get(DIGEST_ARG, "") and not is_digest(env[DIGEST_ARG]):
        problems.append(f".env: {DIGEST_ARG} must be empty (required at deploy time) or sha256:<64 hex>")
    return problems


def compose_text_violations(text: str) -> list[str]:
    """Before interpolation: the iGPU base digest is a required variable, so an unpinned build fails closed."""
    if re.search(r"\$\{" + DIGEST_ARG + r":\?", text):
        return []
    return [f"docker-compose.yml: {DIGEST_ARG} must be passed as ${{{DIGEST_ARG}:?...}} (required, no default)"]


def jetson_dockerfile_violations(text: str, image: str, settings: Settings) -> list[str]:
    """The iGPU base pinned by tag and digest; the rest as every other image (extras, non-root, entry points)."""
    name = f"{image}.Dockerfile"
    problems = dockerfile_violations(text, image, settings)
    releases = re.findall(r"^ARG\s+JETSON_RELEASE=(\S*)\s*$", text, re.M)
    problems += release_violation(releases[0], name) if len(releases) == 1 else [f"{name}: need one ARG JETSON_RELEASE"]
    digests = re.findall(rf"^ARG\s+{DIGEST_ARG}=(\S*)\s*$", text, re.M)
    if len(digests) != 1 or (digests[0] and not is_digest(digests[0])):
        problems.append(f"{name}: need one 'ARG {DIGEST_ARG}=' (empty: required at build time, or sha256:<64 hex>)")
    if re.findall(r"^FROM\s.*$", text, re.M) != [_FROM]:
        problems.append(f"{name}: the only FROM must be exactly {_FROM}")
    return problems
