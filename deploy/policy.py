"""Hardening and pinning rules for the rendered files, so they cannot silently regress.

Schemas say a file is well-formed; these rules say it is safe: non-root, read-only, no
capabilities, admin APIs restricted on HTTP and gRPC, loopback-only ports, Triton pinned at or above
the security-fix release, /dev/shm sized by the formula, and health checks that look at every model.
Each function returns a list of violations (empty when the rule holds).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Any

from deploy import sizing
from deploy.errors import SettingsError
from deploy.settings import ADMIN_API_GROUPS, MIN_TRITON_RELEASE, Settings, release_tuple

TRITON_SERVICES = ("triton", "triton-cpu")
BUILDER_OF = {"triton": "builder", "triton-cpu": "builder-cpu"}
REQUIRED_TRITON_FLAGS = (
    "--model-control-mode=none",
    "--disable-auto-complete-config",
    "--strict-readiness=true",
    "--exit-on-error=true",
    "--allow-sagemaker=false",
    "--allow-vertex-ai=false",
    "--metrics-config=summary_latencies=true",
)
MEMLOCK_UNLIMITED = -1
STACK_BYTES = 67108864


# --- shared --------------------------------------------------------------------------------------


def _flag_values(args: Sequence[str], flag: str) -> list[str]:
    return [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]


def triton_flag_violations(args: Sequence[str], settings: Settings, where: str) -> list[str]:
    """Server flags: control mode, readiness, size cap, cloud endpoints off, admin APIs restricted."""
    problems = [f"{where}: missing {flag}" for flag in REQUIRED_TRITON_FLAGS if flag not in args]
    if "tritonserver" not in args[:1]:
        problems.append(f"{where}: command must start with tritonserver, got {list(args[:1])}")
    sizes = _flag_values(args, "--http-max-input-size")
    if sizes != [str(sizing.http_max_input_bytes(settings))]:
        problems.append(
            f"{where}: --http-max-input-size must be {sizing.http_max_input_bytes(settings)}, got {sizes}"
        )
    repos = _flag_values(args, "--model-repository")
    if repos != ["/models"]:
        problems.append(f"{where}: --model-repository must be /models, got {repos}")
    for flag, proto in (("--http-restricted-api", "HTTP"), ("--grpc-restricted-protocol", "gRPC")):
        values = _flag_values(args, flag)
        if len(values) != 1:
            problems.append(f"{where}: need exactly one {flag} ({proto} admin APIs), got {len(values)}")
            continue
        groups, _, key_value = values[0].partition(":")
        key, _, token = key_value.partition("=")
        if set(groups.split(",")) != set(ADMIN_API_GROUPS):
            problems.append(f"{where}: {flag} restricts {groups!r}, must be {','.join(ADMIN_API_GROUPS)}")
        if key != settings.admin_header or not token.strip():
            problems.append(
                f"{where}: {flag} must end with :{settings.admin_header}=<token>, got {values[0]!r}"
            )
    return problems


def release_violation(release: str, where: str) -> list[str]:
    try:
        if release_tuple(release) >= release_tuple(MIN_TRITON_RELEASE):
            return []
    except SettingsError as exc:
        return [f"{where}: {exc}"]
    return [f"{where}: Triton release {release} is older than {MIN_TRITON_RELEASE} (2025 security fixes)"]


# --- Dockerfiles ----------------------------------------------------------------------------------

_ARG_RE = re.compile(r"^ARG\s+TRITON_RELEASE=(\S+)\s*$", re.M)
_FROM_RE = re.compile(r"^FROM\s+(\S+)", re.M)
_USER_RE = re.compile(r"^USER\s+(\S+)", re.M)


def dockerfile_violations(text: str, name: str, base_repo: str | None) -> list[str]:
    """Base image pinned through TRITON_RELEASE >= 25.07 (when ``base_repo``), last USER non-root."""
    problems = []
    if base_repo is not None:
        releases = _ARG_RE.findall(text)
        if len(releases) != 1:
            problems.append(f"{name}: need one 'ARG TRITON_RELEASE=<yy.mm>' default, found {releases}")
        else:
            problems.extend(release_violation(releases[0], name))
        expected = f"{base_repo}:${{TRITON_RELEASE}}-py3"
        if _FROM_RE.findall(text) != [expected]:
            problems.append(f"{name}: FROM must be exactly {expected}, got {_FROM_RE.findall(text)}")
    users = _USER_RE.findall(text)
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problems.append(f"{name}: the final USER must be non-root, got {users[-1:] or 'none'}")
    if re.search(r"^(ENTRYPOINT|CMD).*pip\s+install", text, re.M):
        problems.append(f"{name}: pip install at container start; install at image build time")
    return problems


# --- compose ------------------------------------------------------------------------------------


def _is_loopback(host_ip: str) -> bool:
    try:
        return ipaddress.ip_address(host_ip).is_loopback
    except ValueError:
        return False


def _service_hardening(name: str, svc: dict[str, Any]) -> list[str]:
    problems = []
    user = str(svc.get("user", ""))
    if not user or user.split(":")[0] in ("0", "root"):
        problems.append(f"service {name}: user must be set and non-root, got {user!r}")
    if svc.get("read_only") is not True:
        problems.append(f"service {name}: read_only must be true")
    if "ALL" not in (svc.get("cap_drop") or []):
        problems.append(f"service {name}: cap_drop must contain ALL")
    if svc.get("cap_add"):
        problems.append(f"service {name}: cap_add is not allowed ({svc['cap_add']})")
    if "no-new-privileges:true" not in (svc.get("security_opt") or []):
        problems.append(f"service {name}: security_opt must contain no-new-privileges:true")
    if svc.get("privileged") or svc.get("network_mode") == "host" or svc.get("ipc") == "host":
        problems.append(f"service {name}: privileged, host network and host IPC are not allowed")
    for port in svc.get("ports") or []:
        if not isinstance(port, dict):
            problems.append(f"service {name}: port {port!r} must use the long syntax with host_ip")
        elif not _is_loopback(str(port.get("host_ip", ""))):
            problems.append(
                f"service {name}: port {port.get('target')} published on {port.get('host_ip')!r}, not loopback"
            )
    return problems


def _gpu_reserved(svc: dict[str, Any]) -> bool:
    devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get(
        "devices"
    ) or []
    return any("gpu" in (d.get("capabilities") or []) for d in devices)


def _triton_service(name: str, svc: dict[str, Any], settings: Settings) -> list[str]:
    problems = triton_flag_violations(svc.get("command") or [], settings, f"service {name}")
    if "--allow-gpu-metrics=true" in (svc.get("command") or []) and name != "triton":
        problems.append(f"service {name}: GPU metrics on a CPU-only service")
    dep = (
        (svc.get("depends_on") or {}).get(BUILDER_OF[name])
        if isinstance(svc.get("depends_on"), dict)
        else None
    )
    if not dep or dep.get("condition") != "service_completed_successfully":
        problems.append(
            f"service {name}: depends_on {BUILDER_OF[name]} with condition service_completed_successfully"
        )
    need_mib = sizing.shm_size_bytes(settings) // sizing.MIB
    if str(svc.get("shm_size")) != f"{need_mib}m":
        problems.append(
            f"service {name}: shm_size must be {need_mib}m (deploy/sizing.py), got {svc.get('shm_size')!r}"
        )
    ulimits = svc.get("ulimits") or {}
    if ulimits.get("memlock") != MEMLOCK_UNLIMITED or ulimits.get("stack") != STACK_BYTES:
        problems.append(f"service {name}: ulimits must be memlock -1 and stack {STACK_BYTES}, got {ulimits}")
    models_mounts = [
        v for v in svc.get("volumes") or [] if isinstance(v, dict) and v.get("target") == "/models"
    ]
    if len(models_mounts) != 1 or models_mounts[0].get("read_only") is not True:
        problems.append(f"service {name}: /models must be mounted once, read-only")
    test = (svc.get("healthcheck") or {}).get("test") or []
    if (svc.get("healthcheck") or {}).get("disable") or not test:
        problems.append(f"service {name}: healthcheck missing")
    else:
        problems.extend(
            healthcheck_violations(
                test[1:] if test[0] in ("CMD", "CMD-SHELL") else test, settings, f"service {name}"
            )
        )
    if (name == "triton") != _gpu_reserved(svc):
        problems.append(f"service {name}: GPU reservation must be on the GPU service only")
    return problems


def healthcheck_violations(command: Sequence[str], settings: Settings, where: str) -> list[str]:
    """The check must name the ensemble and every composing model, and must run an inference."""
    args = list(command)
    problems = []
    if "/opt/deploy/healthcheck.py" not in args:
        problems.append(f"{where}: health check must run /opt/deploy/healthcheck.py, got {args}")
        return problems
    if "--no-infer" in args:
        problems.append(f"{where}: health check must run a real inference (drop --no-infer)")

    def value(flag: str) -> str:
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else ""

    if value("--ensemble") != settings.model_name:
        problems.append(f"{where}: health check ensemble {value('--ensemble')!r} != {settings.model_name!r}")
    missing = set(settings.composing_models) - set(value("--models").split(","))
    if missing:
        problems.append(f"{where}: health check skips composing models {sorted(missing)}")
    return problems


def compose_violations(compose: dict[str, Any], env: dict[str, str], settings: Settings) -> list[str]:
    """All compose rules; ``compose`` is interpolated with ``env`` (the committed .env)."""
    services: dict[str, Any] = compose.get("services") or {}
    problems: list[str] = []
    expected = {
        "builder",
        "triton",
        "builder-cpu",
        "triton-cpu",
        "prometheus",
        "grafana",
        "locust-master",
        "locust-worker",
    }
    if set(services) != expected:
        problems.append(f"services {sorted(services)} != {sorted(expected)}")
    for name, svc in services.items():
        problems.extend(_service_hardening(name, svc))
    for name in TRITON_SERVICES:
        if name in services:
            problems.extend(_triton_service(name, services[name], settings))
    for name, target in (("builder", "tensorrt"), ("builder-cpu", "onnxruntime")):
        svc = services.get(name) or {}
        if svc.get("command") != [target]:
            problems.append(f"service {name}: must build the {target} target, got {svc.get('command')}")
        if (name == "builder") != _gpu_reserved(svc):
            problems.append(f"service {name}: GPU reservation must be on the GPU builder only")
    profiles = {n: tuple(s.get("profiles") or ()) for n, s in services.items()}
    for names, profile in (
        (("builder", "triton"), "gpu"),
        (("builder-cpu", "triton-cpu"), "cpu"),
        (("prometheus", "grafana"), "monitoring"),
        (("locust-master", "locust-worker"), "loadtest"),
    ):
        problems.extend(
            f"service {n}: profiles must be [{profile}]" for n in names if profiles.get(n) != (profile,)
        )
    problems.extend(release_violation(env.get("TRITON_RELEASE", ""), ".env TRITON_RELEASE"))
    for secret in ("TRITON_ADMIN_TOKEN", "GRAFANA_ADMIN_PASSWORD"):
        if env.get(secret, "") != "":
            problems.append(f".env: {secret} must stay empty in the committed file (set it in the shell)")
    if not _is_loopback(env.get("BIND_ADDRESS", "")):
        problems.append(f".env: BIND_ADDRESS must default to loopback, got {env.get('BIND_ADDRESS')!r}")
    return problems


# --- Kubernetes ---------------------------------------------------------------------------------


def _pod_specs(docs: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for _, doc in docs:
        if doc.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            specs.append((f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]))
    return specs


def _container_hardening(where: str, container: dict[str, Any]) -> list[str]:
    sc = container.get("securityContext") or {}
    problems = []
    if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") == 0:
        problems.append(f"{where}: runAsNonRoot must be true and runAsUser non-zero")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append(f"{where}: readOnlyRootFilesystem must be true")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{where}: allowPrivilegeEscalation must be false")
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []) or caps.get("add"):
        problems.append(f"{where}: capabilities must drop ALL and add none")
    if sc.get("privileged"):
        problems.append(f"{where}: privileged is not allowed")
    return problems


def k8s_violations(docs: list[tuple[str, dict[str, Any]]], settings: Settings) -> list[str]:
    problems: list[str] = []
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for _, doc in docs:
        by_kind.setdefault(doc.get("kind", ""), []).append(doc)

    for where, pod in _pod_specs(docs):
        if (pod.get("securityContext") or {}).get("runAsNonRoot") is not True:
            problems.append(f"{where}: pod securityContext.runAsNonRoot must be true")
        if pod.get("hostNetwork") or pod.get("hostIPC") or pod.get("hostPID"):
            problems.append(f"{where}: host namespaces are not allowed")
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            problems.extend(_container_hardening(f"{where} container {c['name']}", c))

    deployments = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == "triton"]
    if len(deployments) != 1:
        return [*problems, "k8s: need exactly one Deployment named triton"]
    pod = deployments[0]["spec"]["template"]["spec"]
    main = next((c for c in pod.get("containers", []) if c["name"] == "triton"), None)
    if main is None:
        return [*problems, "Deployment/triton: no container named triton"]
    problems.extend(triton_flag_violations(main.get("args") or [], settings, "Deployment/triton"))
    limits = (main.get("resources") or {}).get("limits") or {}
    if int(limits.get("nvidia.com/gpu", 0)) < 1:
        problems.append("Deployment/triton: needs a nvidia.com/gpu limit")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe not in main:
            problems.append(f"Deployment/triton: {probe} missing")
    ready_cmd = ((main.get("readinessProbe") or {}).get("exec") or {}).get("command") or []
    problems.extend(healthcheck_violations(ready_cmd, settings, "Deployment/triton readinessProbe"))
    token_env = [e for e in main.get("env") or [] if e.get("name") == "TRITON_ADMIN_TOKEN"]
    if not token_env or "secretKeyRef" not in (token_env[0].get("valueFrom") or {}):
        problems.append("Deployment/triton: TRITON_ADMIN_TOKEN must come from a Secret")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {m["mountPath"]: m for m in main.get("volumeMounts") or []}
    shm = volumes.get((mounts.get("/dev/shm") or {}).get("name", ""), {}).get("emptyDir") or {}
    want = f"{sizing.shm_size_bytes(settings) // sizing.MIB}Mi"
    if shm.get("medium") != "Memory" or shm.get("sizeLimit") != want:
        problems.append(
            f"Deployment/triton: /dev/shm must be an emptyDir medium Memory sizeLimit {want}, got {shm}"
        )
    if (mounts.get("/models") or {}).get("readOnly") is not True:
        problems.append("Deployment/triton: /models must be mounted read-only")
    inits = pod.get("initContainers") or []
    if not any(
        (m.get("mountPath") == "/models" and not m.get("readOnly"))
        for c in inits
        for m in c.get("volumeMounts") or []
    ):
        problems.append("Deployment/triton: an initContainer must build /models")

    problems.extend(_autoscaling_violations(by_kind, settings))
    if len(by_kind.get("PodDisruptionBudget", [])) != 1:
        problems.append("k8s: need one PodDisruptionBudget")
    if len(by_kind.get("ServiceMonitor", [])) != 1:
        problems.append("k8s: need one ServiceMonitor")
    namespaces = by_kind.get("Namespace", [])
    if (
        not namespaces
        or namespaces[0]["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
        != "restricted"
    ):
        problems.append("k8s: the Namespace must enforce Pod Security 'restricted'")
    return problems


def _autoscaling_violations(by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    """The HPA's Pods metric must be one the prometheus-adapter rule actually serves."""
    import yaml

    hpas = by_kind.get("HorizontalPodAutoscaler", [])
    if len(hpas) != 1:
        return ["k8s: need one HorizontalPodAutoscaler"]
    metrics = hpas[0]["spec"].get("metrics") or []
    wanted = {m["pods"]["metric"]["name"] for m in metrics if m.get("type") == "Pods"}
    if not wanted:
        return ["HorizontalPodAutoscaler/triton: needs a Pods metric (queue time)"]
    served: set[str] = set()
    problems = []
    for cm in by_kind.get("ConfigMap", []):
        if "config.yaml" not in (cm.get("data") or {}):
            continue
        for rule in (yaml.safe_load(cm["data"]["config.yaml"]) or {}).get("rules", []):
            served.add(rule.get("name", {}).get("as", ""))
            query = rule.get("metricsQuery", "")
            if "<<.LabelMatchers>>" not in query or "<<.GroupBy>>" not in query:
                problems.append(
                    f"prometheus-adapter rule {rule.get('name')}: metricsQuery must use <<.LabelMatchers>> and <<.GroupBy>>"
                )
            missing = [m for m in settings.composing_models if m not in query]
            if missing:
                problems.append(f"prometheus-adapter rule {rule.get('name')}: queue time ignores {missing}")
    if not wanted <= served:
        problems.append(
            f"HorizontalPodAutoscaler/triton: metrics {sorted(wanted - served)} are served by no adapter rule"
        )
    return problems
