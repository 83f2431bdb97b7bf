"""Kubernetes rules: hardened pods, the proxy sidecar as the only way in, watchdog probes, drain, autoscaling."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from deploy import commands, sizing
from deploy.policy.commands import builder_command_violations, probe_violations, serve_command_violations
from deploy.policy.proxy import proxy_violations
from deploy.settings import Settings, is_pinned
from generator.builder.spec.options import Target

Docs = list[tuple[str, dict[str, Any]]]
PROXY_CONFIGMAP = "triton-proxy"
PROXY_CONFIG_ANNOTATION = "yolo-triton/proxy-config-sha256"


def _pod_specs(docs: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"])
            for _, doc in docs if doc.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


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


def _hardening(docs: Docs) -> list[str]:
    problems = []
    for where, pod in _pod_specs(docs):
        if (pod.get("securityContext") or {}).get("runAsNonRoot") is not True:
            problems.append(f"{where}: pod securityContext.runAsNonRoot must be true")
        if pod.get("hostNetwork") or pod.get("hostIPC") or pod.get("hostPID"):
            problems.append(f"{where}: host namespaces are not allowed")
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            problems += _container_hardening(f"{where} container {c['name']}", c)
    return problems


def _probes(main: dict[str, Any], settings: Settings) -> list[str]:
    """Startup, readiness and liveness all run the watchdog probe; liveness gives up like the supervisor."""
    problems = []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = main.get(probe) or {}
        command = (spec.get("exec") or {}).get("command") or []
        problems += probe_violations(command, settings, f"Deployment/triton {probe}")
        if int(spec.get("timeoutSeconds", 1)) <= settings.probe_timeout_s:
            problems.append(f"Deployment/triton {probe}: timeoutSeconds must exceed the probe's own {settings.probe_timeout_s} s")
    live = main.get("livenessProbe") or {}
    if live.get("failureThreshold") != settings.probe_failures:
        problems.append(f"Deployment/triton livenessProbe: failureThreshold must be {settings.probe_failures}")
    return problems


def _triton_container(pod: dict[str, Any], main: dict[str, Any], settings: Settings) -> list[str]:
    gpu = settings.kubernetes_gpu
    problems = serve_command_violations(main.get("args") or [], settings, "Deployment/triton", gpu=gpu,
                                        http_address=commands.K8S_HTTP_ADDRESS)
    problems += _probes(main, settings)
    limits = (main.get("resources") or {}).get("limits") or {}
    if (int(limits.get("nvidia.com/gpu", 0)) >= 1) != gpu:
        problems.append("Deployment/triton: a nvidia.com/gpu limit on the GPU stack, none on the CPU stack "
                        f"(kubernetes_stack {settings.kubernetes_stack})")
    if main.get("image") != settings.kubernetes_images()[1]:
        problems.append(f"Deployment/triton: image must be {settings.kubernetes_images()[1]}, got {main.get('image')}")
    ports = {p.get("containerPort"): p.get("name") for p in main.get("ports") or []}
    if settings.grpc_port in ports:
        problems.append("Deployment/triton: Triton's gRPC port must not be a container port (loopback only)")
    if settings.http_port in ports and ports[settings.http_port] != "http":
        problems.append("Deployment/triton: Triton's HTTP port, for the rollout Job, must be the container port 'http'")
    env = {e.get("name"): e for e in main.get("env") or []}
    if "secretKeyRef" not in ((env.get("TRITON_ADMIN_TOKEN") or {}).get("valueFrom") or {}):
        problems.append("Deployment/triton: TRITON_ADMIN_TOKEN must come from a Secret")
    if str((env.get("OPENCV_IO_MAX_IMAGE_PIXELS") or {}).get("value")) != str(settings.max_image_pixels):
        problems.append(f"Deployment/triton: OPENCV_IO_MAX_IMAGE_PIXELS must be {settings.max_image_pixels}")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {m["mountPath"]: m for m in main.get("volumeMounts") or []}
    shm = volumes.get((mounts.get("/dev/shm") or {}).get("name", ""), {}).get("emptyDir") or {}
    want = f"{sizing.shm_size_bytes(settings, gpu) // sizing.MIB}Mi"
    if shm.get("medium") != "Memory" or shm.get("sizeLimit") != want:
        problems.append(f"Deployment/triton: /dev/shm must be an emptyDir medium Memory sizeLimit {want}, got {shm}")
    if (mounts.get(commands.MODELS_VOLUME) or {}).get("readOnly") is not True:
        problems.append(f"Deployment/triton: {commands.MODELS_VOLUME} must be mounted read-only")
    problems += _claim(pod, main, "Deployment/triton") + _gpu_product(pod, settings, "Deployment/triton")
    return problems


def _gpu_product(pod: dict[str, Any], settings: Settings, where: str) -> list[str]:
    """A plan belongs to the GPU it was built on: with gpu_product set, the build and the pods land on it."""
    want = {"nvidia.com/gpu.product": settings.gpu_product} if settings.kubernetes_gpu and settings.gpu_product else None
    if (pod.get("nodeSelector") or None) != want:
        return [f"{where}: nodeSelector must be {want} (gpu_product), got {pod.get('nodeSelector')}"]
    return []


def _claim(pod: dict[str, Any], container: dict[str, Any], where: str) -> list[str]:
    """``container`` mounts the shared versioned repository (the ReadWriteMany claim) at the models path."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mount: dict[str, Any] = next((m for m in container.get("volumeMounts") or [] if m.get("mountPath") == commands.MODELS_VOLUME), {})
    claim = (volumes.get(mount.get("name", ""), {}).get("persistentVolumeClaim") or {}).get("claimName")
    if claim != commands.MODELS_CLAIM:
        return [f"{where}: {commands.MODELS_VOLUME} must be the shared claim {commands.MODELS_CLAIM}, got {claim}"]
    return []


def _proxy_container(pod: dict[str, Any], proxy: dict[str, Any] | None, settings: Settings) -> list[str]:
    if proxy is None:
        return ["Deployment/triton: no proxy container (TLS and body limits in front of Triton)"]
    problems = []
    if not is_pinned(str(proxy.get("image", ""))):
        problems.append(f"Deployment/triton proxy: image {proxy.get('image')!r} must be pinned by tag and digest")
    ports = sorted(p.get("containerPort") for p in proxy.get("ports") or [])
    if ports != sorted((settings.proxy_http_port, settings.proxy_grpc_port)):
        problems.append(f"Deployment/triton proxy: container ports must be the proxy ports, got {ports}")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {m["mountPath"]: m for m in proxy.get("volumeMounts") or []}
    config = volumes.get((mounts.get("/etc/nginx/nginx.conf") or {}).get("name", ""), {})
    if (config.get("configMap") or {}).get("name") != PROXY_CONFIGMAP:
        problems.append(f"Deployment/triton proxy: nginx.conf must come from the ConfigMap {PROXY_CONFIGMAP}")
    tls = volumes.get((mounts.get("/etc/nginx/tls") or {}).get("name", ""), {})
    if not (tls.get("secret") or {}).get("secretName"):
        problems.append("Deployment/triton proxy: /etc/nginx/tls must come from a Secret")
    return problems


def _deployment(doc: dict[str, Any], by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    template = doc["spec"]["template"]
    pod = template["spec"]
    containers = {c["name"]: c for c in pod.get("containers") or []}
    if "triton" not in containers:
        return ["Deployment/triton: no container named triton"]
    problems = _triton_container(pod, containers["triton"], settings)
    problems += _proxy_container(pod, containers.get("proxy"), settings)
    timing = commands.stop_timing(settings)
    if int(pod.get("terminationGracePeriodSeconds", 30)) < timing.container_grace_s:
        problems.append(f"Deployment/triton: terminationGracePeriodSeconds must be >= {timing.container_grace_s} "
                        "(the watchdog's drain plus a margin)")
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        if any(m.get("mountPath") == commands.MODELS_VOLUME and not m.get("readOnly") for m in c.get("volumeMounts") or []):
            problems.append(f"Deployment/triton container {c['name']}: no per-pod build; {commands.MODELS_VOLUME} is "
                            "read-only in the pods (the build Job fills the shared claim)")
    configs = [c for c in by_kind.get("ConfigMap", []) if c["metadata"]["name"] == PROXY_CONFIGMAP]
    if len(configs) != 1:
        return [*problems, f"k8s: need one ConfigMap {PROXY_CONFIGMAP}"]
    conf = str((configs[0].get("data") or {}).get("nginx.conf", ""))
    problems += proxy_violations(conf, settings, f"ConfigMap/{PROXY_CONFIGMAP}")
    annotation = ((template.get("metadata") or {}).get("annotations") or {}).get(PROXY_CONFIG_ANNOTATION)
    if annotation != hashlib.sha256(conf.encode()).hexdigest():
        problems.append(f"Deployment/triton: annotation {PROXY_CONFIG_ANNOTATION} must be the ConfigMap's sha256")
    return problems


def _network_policy(by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    """Ingress: the proxy ports from anyone, metrics from Prometheus only, nothing else."""
    policies = [p for p in by_kind.get("NetworkPolicy", [])
                if (p["spec"].get("podSelector") or {}).get("matchLabels") == {"app.kubernetes.io/name": "triton"}]
    if len(policies) != 1 or "Ingress" not in (policies[0]["spec"].get("policyTypes") or []):
        return ["k8s: need one Ingress NetworkPolicy selecting the triton pods"]
    problems = []
    for rule in policies[0]["spec"].get("ingress") or []:
        ports = {str(p.get("port")) for p in rule.get("ports") or []}
        if not ports:
            problems.append("NetworkPolicy/triton: a rule without ports admits every port")
        if ports & {str(settings.grpc_port), "grpc"}:
            problems.append("NetworkPolicy/triton: Triton's own gRPC port must not be admitted")
        if ports & {str(settings.http_port), "http"}:
            problems += _rollout_rule(rule, ports, settings)
        elif "metrics" in ports or str(settings.metrics_port) in ports:
            peers = rule.get("from") or []
            if not peers or any(not p.get("namespaceSelector") or not p.get("podSelector") for p in peers):
                problems.append("NetworkPolicy/triton: the metrics port must admit only Prometheus (namespace and pod)")
        elif ports - {"https", "grpcs", str(settings.proxy_http_port), str(settings.proxy_grpc_port)}:
            problems.append(f"NetworkPolicy/triton: unexpected ports {sorted(ports)}")
    return problems


def _rollout_rule(rule: dict[str, Any], ports: set[str], settings: Settings) -> list[str]:
    """Triton's HTTP port (and metrics) from the rollout Job's pods of this namespace only."""
    want = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": commands.ROLLOUT_POD_NAME}}}]
    problems = []
    if rule.get("from") != want:
        problems.append(f"NetworkPolicy/triton: Triton's HTTP port must admit only the rollout Job's pods ({want}), "
                        f"got {rule.get('from')}")
    if ports - {str(settings.http_port), "http", str(settings.metrics_port), "metrics"}:
        problems.append(f"NetworkPolicy/triton: the rollout Job's rule admits more than HTTP and metrics: {sorted(ports)}")
    return problems


def _services(by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    problems = []
    names = set()
    for service in by_kind.get("Service", []):
        name, spec = service["metadata"]["name"], service["spec"]
        names.add(name)
        targets = {str(p.get("targetPort")) for p in spec.get("ports") or []}
        if name == "triton" and targets & {"http", "grpc", str(settings.http_port), str(settings.grpc_port)}:
            problems.append("Service/triton: must expose the proxy's ports, not Triton's HTTP/gRPC")
        if name == commands.ADMIN_SERVICE and (spec.get("clusterIP") != "None" or not targets <= {"http", "metrics"}):
            problems.append(f"Service/{name}: must be headless (one address per pod, for the rollout Job) and "
                            f"expose only Triton's http and metrics, got {sorted(targets)}")
    if commands.ADMIN_SERVICE not in names:
        problems.append(f"k8s: need the headless Service {commands.ADMIN_SERVICE} (the rollout Job's way to every pod)")
    return problems


def _build_job(job: dict[str, Any], settings: Settings) -> list[str]:
    where = f"Job/{job['metadata']['name']}"
    pod = job["spec"]["template"]["spec"]
    containers = pod.get("containers") or []
    if len(containers) != 1:
        return [f"{where}: one container, the builder"]
    target: Target = "tensorrt" if settings.kubernetes_gpu else "embedded"
    problems = builder_command_violations(containers[0].get("args") or [], settings, target, where)
    if containers[0].get("image") != settings.kubernetes_images()[0]:
        problems.append(f"{where}: image must be {settings.kubernetes_images()[0]}")
    return problems + _claim(pod, containers[0], where) + _gpu_product(pod, settings, where)


def _rollout_job(job: dict[str, Any], settings: Settings) -> list[str]:
    """The rollout reaches Triton through the headless Service only, as the pods the policy admits, with the token
    from the Secret as a file; its state in the shared claim."""
    where = f"Job/{job['metadata']['name']}"
    template = job["spec"]["template"]
    pod, labels = template["spec"], (template.get("metadata") or {}).get("labels") or {}
    problems = []
    if labels.get("app.kubernetes.io/name") != commands.ROLLOUT_POD_NAME:
        problems.append(f"{where}: its pods must be labelled app.kubernetes.io/name={commands.ROLLOUT_POD_NAME} "
                        "(the NetworkPolicy admits them)")
    containers = pod.get("containers") or []
    if len(containers) != 1:
        return [*problems, f"{where}: one container, the rollout"]
    main = containers[0]
    args = [a for a in main.get("args") or [] if a != "--rollback"]
    if main.get("command") != ["python3", "-m", "deploy.entrypoints.rollout_job"] or args != commands.k8s_rollout_command(settings):
        problems.append(f"{where}: must run python3 -m deploy.entrypoints.rollout_job {' '.join(commands.k8s_rollout_command(settings))}")
    if any(e.get("name") == "TRITON_ADMIN_TOKEN" and "value" in e for e in main.get("env") or []):
        problems.append(f"{where}: the admin token must not be a literal")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    token_dir = commands.ADMIN_TOKEN_FILE.rsplit("/", 1)[0]
    mount: dict[str, Any] = next((m for m in main.get("volumeMounts") or [] if m.get("mountPath") == token_dir), {})
    secret = volumes.get(mount.get("name", ""), {}).get("secret") or {}
    items = {i.get("key"): i.get("path") for i in secret.get("items") or []}
    if secret.get("secretName") != "triton-admin-token" or items != {"token": commands.ADMIN_TOKEN_FILE.rsplit("/", 1)[1]}:
        problems.append(f"{where}: {commands.ADMIN_TOKEN_FILE} must be the key token of the Secret triton-admin-token")
    return problems + _claim(pod, main, where)


def _jobs(by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    jobs = {j["metadata"]["name"]: j for j in by_kind.get("Job", [])}
    problems = []
    for name in ("triton-build-models", "triton-rollout", "triton-rollback"):
        if name not in jobs:
            problems.append(f"k8s: need the Job {name}")
        elif name == "triton-build-models":
            problems += _build_job(jobs[name], settings)
        else:
            problems += _rollout_job(jobs[name], settings)
    claims = [c for c in by_kind.get("PersistentVolumeClaim", []) if c["metadata"]["name"] == commands.MODELS_CLAIM]
    if len(claims) != 1 or claims[0]["spec"].get("accessModes") != ["ReadWriteMany"]:
        problems.append(f"k8s: need one ReadWriteMany PersistentVolumeClaim {commands.MODELS_CLAIM} (pods on many nodes)")
    return problems


def k8s_violations(docs: Docs, settings: Settings) -> list[str]:
    problems = _hardening(docs)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for _, doc in docs:
        by_kind.setdefault(doc.get("kind", ""), []).append(doc)
    deployments = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == "triton"]
    if len(deployments) != 1:
        return [*problems, "k8s: need exactly one Deployment named triton"]
    problems += _deployment(deployments[0], by_kind, settings)
    problems += _network_policy(by_kind, settings)
    problems += _services(by_kind, settings)
    problems += _jobs(by_kind, settings)
    problems += _autoscaling_violations(by_kind, settings)
    for kind in ("PodDisruptionBudget", "ServiceMonitor"):
        if len(by_kind.get(kind, [])) != 1:
            problems.append(f"k8s: need one {kind}")
    namespaces = by_kind.get("Namespace", [])
    if not namespaces or namespaces[0]["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") != "restricted":
        problems.append("k8s: the Namespace must enforce Pod Security 'restricted'")
    return problems


def _autoscaling_violations(by_kind: dict[str, list[dict[str, Any]]], settings: Settings) -> list[str]:
    """The HPA's Pods metric must be one the prometheus-adapter rule actually serves."""
    import yaml

    hpas = by_kind.get("HorizontalPodAutoscaler", [])
    if len(hpas) != 1:
        return ["k8s: need one HorizontalPodAutoscaler"]
    wanted = {m["pods"]["metric"]["name"] for m in hpas[0]["spec"].get("metrics") or [] if m.get("type") == "Pods"}
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
                problems.append(f"prometheus-adapter rule {rule.get('name')}: metricsQuery must use "
                                "<<.LabelMatchers>> and <<.GroupBy>>")
            if f'model=~"{settings.step_regex()}"' not in query:
                problems.append(f"prometheus-adapter rule {rule.get('name')}: queue time ignores some steps: it "
                                f'must read model=~"{settings.step_regex()}" (every version\'s)')
    if not wanted <= served:
        problems.append(f"HorizontalPodAutoscaler/triton: metrics {sorted(wanted - served)} are served by no adapter rule")
    return problems
