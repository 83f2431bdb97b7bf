"""deploy/k8s: kubernetes-validate strict schemas, our ServiceMonitor schema, and the policy rules."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import sizing
from deploy.policy import k8s_violations
from deploy.render.files import HPA_METRIC_NAME, K8S_RESOURCE_FILES
from deploy.settings import Settings
from deploy.validate import k8s_schema_errors, kustomization_errors

from .helpers import find_doc

Docs = list[tuple[str, dict[str, Any]]]


def test_manifests_validate_strictly_for_the_target_kubernetes(k8s_docs: Docs, settings: Settings) -> None:
    kinds = sorted(doc["kind"] for _, doc in k8s_docs)
    assert kinds == sorted(["Namespace", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                            "ServiceMonitor", "PrometheusRule", "ConfigMap", "ConfigMap", "NetworkPolicy", "Service",
                            "Job", "Job", "Service", "PersistentVolumeClaim", "Job", "Job", "Job"])
    assert k8s_schema_errors(k8s_docs, settings.kubernetes_version) == []


def test_strict_schema_catches_a_misspelt_field(k8s_docs: Docs, settings: Settings) -> None:
    deployment = find_doc(k8s_docs, "Deployment", "triton")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    service = find_doc(k8s_docs, "Service", "triton")
    service["spec"]["ports"][0]["port"] = "eight thousand"
    problems = k8s_schema_errors(k8s_docs, settings.kubernetes_version)
    assert any("readOnlyRootFileSystem" in p for p in problems)
    assert any("Service/triton" in p and "port" in p for p in problems)


def test_servicemonitor_crd_has_its_own_schema(k8s_docs: Docs, settings: Settings) -> None:
    monitor = find_doc(k8s_docs, "ServiceMonitor", "triton")
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    monitor["spec"]["endpoints"][0]["scheme"] = "ftp"
    problems = k8s_schema_errors([("servicemonitor.yaml", monitor)], settings.kubernetes_version)
    assert any("intervall" in p for p in problems) and any("ftp" in p for p in problems)


def test_an_unknown_kind_is_not_silently_skipped(settings: Settings) -> None:
    doc = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert any("no schema" in p for p in k8s_schema_errors([("w.yaml", doc)], settings.kubernetes_version))


def test_kustomization_lists_every_resource_but_not_the_load_test(rendered_dir: Path) -> None:
    k8s = rendered_dir / "k8s"
    assert kustomization_errors(k8s, K8S_RESOURCE_FILES) == []
    resources = yaml.safe_load((k8s / "kustomization.yaml").read_text())["resources"]
    assert "locust.yaml" not in resources and "deployment.yaml" in resources and "pvc.yaml" in resources
    assert not {"build-job.yaml", "rollout-job.yaml", "rollback-job.yaml"} & set(resources)  # one-shots
    (k8s / "pdb.yaml").rename(k8s / "pdb.moved")
    try:
        assert any("missing files: pdb.yaml" in p for p in kustomization_errors(k8s, K8S_RESOURCE_FILES))
    finally:
        (k8s / "pdb.moved").rename(k8s / "pdb.yaml")


def test_default_manifests_follow_every_rule(k8s_docs: Docs, settings: Settings) -> None:
    assert k8s_violations(k8s_docs, settings) == []


def test_deployment_gpu_probes_shm_and_token(k8s_docs: Docs, settings: Settings) -> None:
    pod = find_doc(k8s_docs, "Deployment", "triton")["spec"]["template"]["spec"]
    main, proxy = pod["containers"]
    assert (main["name"], proxy["name"]) == ("triton", "proxy")
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
    probe = ["python3", "/opt/deploy/watchdog.py", "probe", "--url", "127.0.0.1:8000", "--model",
             settings.model_name, "--timeout-s", "5"]
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[name]["exec"]["command"] == probe
    assert main["livenessProbe"]["failureThreshold"] == settings.probe_failures
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm == {"medium": "Memory", "sizeLimit": f"{sizing.shm_size_bytes(settings) // sizing.MIB}Mi"}
    assert main["resources"]["limits"]["memory"] == f"{sizing.pod_memory_limit_mib(settings)}Mi"
    assert any("$(TRITON_ADMIN_TOKEN)" in a for a in main["args"])
    assert main["args"][:3] == ["python3", "-m", "deploy.entrypoints.serve_models"]
    # gRPC: loopback, behind the proxy; HTTP for the rollout Job (the NetworkPolicy admits only its pods).
    assert [p["name"] for p in main["ports"]] == ["http", "metrics", "watchdog"]
    assert "--http-address=0.0.0.0" in main["args"] and "--grpc-address=127.0.0.1" in main["args"]
    assert [p["containerPort"] for p in proxy["ports"]] == [settings.proxy_http_port, settings.proxy_grpc_port]
    assert proxy["image"] == settings.nginx_image
    # preStop (5 s) + watchdog drain (40 s) + margin: the kubelet never cuts a drain short.
    assert pod["terminationGracePeriodSeconds"] == 50
    # No per-pod build: the shared versioned repository, read-only; the build Job fills it on a GPU.
    assert "initContainers" not in pod
    claim = next(v for v in pod["volumes"] if v["name"] == "model-repository")["persistentVolumeClaim"]
    assert claim == {"claimName": "triton-models", "readOnly": True}
    build = _pod(k8s_docs, "Job", "triton-build-models")["containers"][0]
    assert build["args"][:4] == ["--volume=/models", "--link=current", "--versioned", "--"]
    assert build["resources"]["limits"]["nvidia.com/gpu"] == 1
    pvc = find_doc(k8s_docs, "PersistentVolumeClaim", "triton-models")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_network_policy_admits_the_proxy_ports_and_prometheus_only(k8s_docs: Docs, settings: Settings) -> None:
    policy = find_doc(k8s_docs, "NetworkPolicy", "triton")
    clients, metrics, rollout = policy["spec"]["ingress"]
    assert rollout["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "triton-rollout"}}}]
    assert [p["port"] for p in rollout["ports"]] == ["http", "metrics"]
    assert "from" not in clients and [p["port"] for p in clients["ports"]] == ["https", "grpcs"]
    assert [p["port"] for p in metrics["ports"]] == ["metrics", "watchdog"]
    (peer,) = metrics["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": settings.prometheus_namespace}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    service = find_doc(k8s_docs, "Service", "triton")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["https", "grpcs", "metrics", "watchdog"]


def test_locust_goes_through_the_proxy_with_its_certificate_only(k8s_docs: Docs) -> None:
    for job in ("locust-master", "locust-worker"):
        pod = _pod(k8s_docs, "Job", job)
        (container,) = pod["containers"]
        assert {"name": "LOADTEST_CA_CERT", "value": "/etc/locust/ca.crt"} in container["env"]
        ca = next(v for v in pod["volumes"] if v["name"] == "proxy-ca")["secret"]
        assert ca["items"] == [{"key": "tls.crt", "path": "tls.crt"}]
    master = _pod(k8s_docs, "Job", "locust-master")["containers"][0]
    assert "--host=grpcs://triton.yolo-serving.svc:8444" in master["args"]


def test_hpa_scales_on_the_metric_the_adapter_serves(k8s_docs: Docs, settings: Settings) -> None:
    hpa = find_doc(k8s_docs, "HorizontalPodAutoscaler", "triton")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == HPA_METRIC_NAME
    assert hpa["spec"]["minReplicas"] >= 2
    rules = yaml.safe_load(find_doc(k8s_docs, "ConfigMap", "prometheus-adapter-triton-rules")["data"]["config.yaml"])
    (rule,) = rules["rules"]
    assert rule["name"]["as"] == HPA_METRIC_NAME
    assert "nv_inference_queue_duration_us" in rule["metricsQuery"]
    pdb = find_doc(k8s_docs, "PodDisruptionBudget", "triton")
    assert pdb["spec"]["maxUnavailable"] == 1


def _pod(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    return find_doc(docs, kind, name)["spec"]["template"]["spec"]


def _args(docs: Docs, job: str) -> list[str]:
    args: list[str] = _pod(docs, "Job", job)["containers"][0]["args"]
    return args


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["securityContext"].update(runAsNonRoot=False),
         "runAsNonRoot"),
        (lambda d: _pod(d, "Job", "locust-worker")["containers"][0]["securityContext"].update(
            readOnlyRootFilesystem=False), "readOnlyRootFilesystem"),
        (lambda d: _pod(d, "Job", "triton-rollout")["containers"][0]["securityContext"].update(
            allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
        (lambda d: _pod(d, "Job", "locust-master")["containers"][0]["securityContext"]["capabilities"].update(
            add=["NET_ADMIN"]), "capabilities"),
        (lambda d: _pod(d, "Deployment", "triton").update(hostNetwork=True), "host namespaces"),
        (lambda d: _pod(d, "Deployment", "triton")["volumes"][1]["emptyDir"].update(sizeLimit="64Mi"), "/dev/shm"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["volumeMounts"][0].pop("readOnly"),
         "/models must be mounted read-only"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0].pop("startupProbe"), "startupProbe"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["livenessProbe"].update(
            exec={"command": ["curl", "-f", "127.0.0.1:8000/v2/health/live"]}), "livenessProbe"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["readinessProbe"].update(timeoutSeconds=1),
         "timeoutSeconds"),
        (lambda d: _pod(d, "Deployment", "triton").update(terminationGracePeriodSeconds=30),
         "terminationGracePeriodSeconds"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["ports"].append(
            {"name": "grpc", "containerPort": 8001}), "loopback only"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][0]["ports"].append(
            {"port": "http", "protocol": "TCP"}), "only the rollout Job's pods"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][2]["from"][0]["podSelector"].update(
            matchLabels={"app.kubernetes.io/name": "triton"}), "only the rollout Job's pods"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][2]["from"].append(
            {"namespaceSelector": {}}), "only the rollout Job's pods"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][2]["ports"].append(
            {"port": "https", "protocol": "TCP"}), "more than HTTP and metrics"),
        (lambda d: find_doc(d, "Job", "triton-rollout")["spec"]["template"]["metadata"]["labels"].update(
            {"app.kubernetes.io/name": "other"}), "the NetworkPolicy admits them"),
        (lambda d: _args(d, "triton-rollout").__setitem__(1, "--fleet=triton.yolo-serving.svc"), "deploy.entrypoints.rollout_job"),
        (lambda d: _args(d, "triton-rollout").__setitem__(2, "--url=triton.yolo-serving.svc:8443"),
         "deploy.entrypoints.rollout_job"),
        (lambda d: _args(d, "triton-rollback").append("--admin-token=plain"), "deploy.entrypoints.rollout_job"),
        (lambda d: _pod(d, "Job", "triton-rollout")["containers"][0]["env"].append(
            {"name": "TRITON_ADMIN_TOKEN", "value": "plain"}), "not be a literal"),
        (lambda d: next(v for v in _pod(d, "Job", "triton-rollout")["volumes"] if v["name"] == "admin-token")[
            "secret"].update(secretName="other"), "Secret triton-admin-token"),
        (lambda d: next(v for v in _pod(d, "Job", "triton-rollout")["volumes"] if v["name"] == "model-repository")
         .update(persistentVolumeClaim=None, emptyDir={}), "shared claim triton-models"),
        (lambda d: find_doc(d, "Service", "triton-admin")["spec"].pop("clusterIP"), "headless"),
        (lambda d: find_doc(d, "Service", "triton-admin")["spec"]["ports"][0].update(targetPort="grpc"), "headless"),
        (lambda d: find_doc(d, "PersistentVolumeClaim", "triton-models")["spec"].update(accessModes=["ReadWriteOnce"]),
         "ReadWriteMany"),
        (lambda d: _pod(d, "Deployment", "triton")["volumes"][0].update(persistentVolumeClaim=None,
                                                                         emptyDir={"sizeLimit": "4Gi"}),
         "shared claim triton-models"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"].pop(1), "no proxy container"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][1].update(image="nginx:1.30.5-alpine"), "pinned"),
        (lambda d: find_doc(d, "ConfigMap", "triton-proxy")["data"].update(
            {"nginx.conf": find_doc(d, "ConfigMap", "triton-proxy")["data"]["nginx.conf"].replace(
                "client_max_body_size 33620096", "client_max_body_size 0")}), "client_max_body_size"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][1].pop("from"), "only Prometheus"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][0]["ports"].append(
            {"port": 8001, "protocol": "TCP"}), "must not be admitted"),
        (lambda d: find_doc(d, "NetworkPolicy", "triton")["spec"]["ingress"][0].pop("ports"), "every port"),
        (lambda d: find_doc(d, "Service", "triton")["spec"]["ports"][0].update(targetPort="http"),
         "not Triton's HTTP/gRPC"),
        (lambda d: _pod(d, "Job", "triton-build-models")["containers"][0]["args"].append("--output=/models/x"),
         "--output"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu"),
         "nvidia.com/gpu"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["args"].remove("--allow-sagemaker=false"),
         "--allow-sagemaker=false"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["env"][0].update(value="plain", valueFrom={}),
         "Secret"),
        (lambda d: _pod(d, "Deployment", "triton")["containers"][0]["env"].pop(2), "OPENCV_IO_MAX_IMAGE_PIXELS"),
        (lambda d: _pod(d, "Deployment", "triton").update(initContainers=[
            {**_pod(d, "Job", "triton-build-models")["containers"][0], "name": "build-models"}]), "no per-pod build"),
        (lambda d: find_doc(d, "HorizontalPodAutoscaler", "triton")["spec"]["metrics"][0]["pods"]["metric"].update(
            name="cpu_typo"), "served by no adapter rule"),
        (lambda d: find_doc(d, "Namespace", "yolo-serving")["metadata"]["labels"].pop(
            "pod-security.kubernetes.io/enforce"), "restricted"),
    ],
)
def test_each_k8s_rule_catches_its_regression(k8s_docs: Docs, settings: Settings, mutate: Any, expected: str) -> None:
    broken = copy.deepcopy(k8s_docs)
    mutate(broken)
    problems = k8s_violations(broken, settings)
    assert any(expected in p for p in problems), problems


def test_the_cpu_stack_renders_a_deployment_on_the_slim_images_without_a_gpu(tmp_path: Path) -> None:
    """kubernetes_stack cpu: the CPU stack's builder and slim Triton image, --target embedded, no GPU requested;
    the default (GPU) render checked against these settings misses all of it."""
    from deploy.checks import run_checks
    from deploy.render.files import render_all, write_rendered

    settings = Settings(kubernetes_stack="cpu")
    write_rendered(render_all(settings), tmp_path)
    assert run_checks(tmp_path, settings) == []
    deployment = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    builder = yaml.safe_load((tmp_path / "k8s" / "build-job.yaml").read_text())["spec"]["template"]["spec"][
        "containers"][0]
    triton = next(c for c in pod["containers"] if c["name"] == "triton")
    assert builder["image"].endswith("/yolo-builder-cpu:2.51.0-0.1.0") and "embedded" in builder["args"]
    assert triton["image"].endswith("/yolo-triton-cpu:2.51.0-0.1.0")
    assert not [a for a in triton["args"] if a.startswith("--http-max-input-size")]  # Triton 2.51
    for container in (builder, triton):
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
    write_rendered(render_all(Settings()), tmp_path)
    problems = run_checks(tmp_path, settings, check_drift=False)
    assert any("nvidia.com/gpu" in p for p in problems) and any("--target" in p for p in problems)
    with pytest.raises(Exception, match="kubernetes_stack"):
        Settings(kubernetes_stack="tpu")


def test_a_gpu_product_pins_the_pods_and_the_build_to_it_and_a_storage_class_is_named(tmp_path: Path) -> None:
    """The plan is built on the build Job's GPU: with gpu_product set, the Job and every pod land on that product."""
    from deploy.checks import run_checks
    from deploy.render.files import render_all, write_rendered

    settings = Settings(gpu_product="NVIDIA-H100-80GB-HBM3", models_storage_class="nfs-client")
    write_rendered(render_all(settings), tmp_path)
    assert run_checks(tmp_path, settings) == []
    for name in ("deployment.yaml", "build-job.yaml"):
        pod = yaml.safe_load((tmp_path / "k8s" / name).read_text())["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pvc = yaml.safe_load((tmp_path / "k8s" / "pvc.yaml").read_text())
    assert pvc["spec"]["storageClassName"] == "nfs-client"
    rollout = yaml.safe_load((tmp_path / "k8s" / "rollout-job.yaml").read_text())["spec"]["template"]["spec"]
    assert "nodeSelector" not in rollout  # no GPU: it runs anywhere
    write_rendered(render_all(Settings()), tmp_path)  # rendered without it: the policy names the missing selector
    problems = run_checks(tmp_path, settings, check_drift=False)
    assert any("Deployment/triton: nodeSelector" in p for p in problems)
    assert any("Job/triton-build-models: nodeSelector" in p for p in problems)
    with pytest.raises(Exception, match="gpu_product"):
        Settings(gpu_product="has space")
