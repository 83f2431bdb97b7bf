"""The stack serves: built offline into the volume, healthy, the embedded server's detections through both TLS
protocols, oversized bodies and foreign clients refused by the proxy, every container hardened."""

from __future__ import annotations

import http.client
import ssl
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients import DetectionClient, TlsError
from deploy import sizing
from deploy.local.credentials import make_ca
from deploy.settings import Settings
from generator.server.embedded import EmbeddedServer
from tests.conftest import free_port

from .conftest import LiveStack, docker, probe_image

pytestmark = [pytest.mark.live]

SERVICES = ("pod", "proxy", "triton-cpu", "prometheus")


def _health(stack: LiveStack, service: str) -> str:
    return stack.inspect(service, "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}")


def test_the_builder_fills_the_volume_offline_and_every_service_is_healthy(stack: LiveStack) -> None:
    assert stack.inspect("builder-cpu", "{{.HostConfig.NetworkMode}} {{.State.ExitCode}}") == "none 0"
    logs = docker("logs", stack.container("builder-cpu"))
    assert "/models/current -> versions, version 1" in logs.stdout + logs.stderr
    assert stack.exec("triton-cpu", "readlink", "/models/current").stdout.strip() == "versions"
    assert stack.index()["stable"] == 1  # the versioned repository (docs/UPDATING.md): version 1 is stable
    manifest = stack.stable_manifest()
    assert manifest["target"] == "embedded" and manifest["precision"] == "fp32"
    assert {service: _health(stack, service) for service in SERVICES} == {
        "pod": "running", "proxy": "healthy", "triton-cpu": "healthy", "prometheus": "healthy"}
    print(f"\n`python -m deploy up --local` to every service healthy: {stack.up_s:.0f} s")


def _rows(result: object) -> list[tuple[int, float, tuple[float, ...]]]:
    return [(d.class_id, d.score, tuple(d.box)) for d in result]  # type: ignore[attr-defined]


def test_detections_through_the_proxy_equal_the_embedded_servers(stack: LiveStack, scenes: list[bytes],
                                                                tmp_path: Path) -> None:
    """The repository the builder made, served by the embedded Triton here, answers as the stack does over
    gRPC-TLS and HTTPS: same server, same ensemble, same stub environment lock."""
    repository = tmp_path / "repository"
    docker("cp", "-L", f"{stack.container('triton-cpu')}:/models/current", str(repository))
    server = EmbeddedServer(repository, free_port(), free_port(), free_port(), log_file=tmp_path / "triton.log")
    with server, DetectionClient(f"grpc://{server.grpc_url}") as direct:
        expected = [_rows(r) for r in direct.detect_many(scenes)]
    assert sum(len(rows) for rows in expected) >= len(scenes)  # the scenes hold objects the demo detects
    for scheme in ("grpcs", "https"):
        with stack.client(scheme) as client:
            got = [_rows(r) for r in client.detect_many(scenes)]
        for want, have in zip(expected, got, strict=True):
            assert [c for c, _, _ in have] == [c for c, _, _ in want], scheme
            np.testing.assert_allclose([s for _, s, _ in have], [s for _, s, _ in want], atol=1e-4)
            np.testing.assert_allclose([b for _, _, b in have], [b for _, _, b in want], atol=1e-3)


def _failures(stack: LiveStack) -> float:
    """Triton's failed ensemble requests, read from its metrics port inside the pod."""
    script = ("import urllib.request; t = urllib.request.urlopen('http://127.0.0.1:8002/metrics').read().decode(); "
              "print(sum(float(l.split()[-1]) for l in t.splitlines() "
              "if l.startswith('nv_inference_request_failure{') and 'model=\"yolo\"' in l))")
    return float(stack.exec("triton-cpu", "python3", "-c", script).stdout)


def _https(stack: LiveStack) -> tuple[str, int]:
    host_port = stack.endpoints["https"].removeprefix("https://")
    return host_port.split(":")[0], int(host_port.split(":")[1])


def test_a_body_above_the_limit_gets_413_from_nginx_and_never_reaches_triton(stack: LiveStack) -> None:
    limit = sizing.max_request_bytes(Settings())
    failures, since = _failures(stack), time.time()
    host, port = _https(stack)
    conn = http.client.HTTPSConnection(host, port, context=ssl.create_default_context(cafile=str(stack.ca_cert)),
                                       timeout=30)
    try:  # announced, not sent: nginx answers from the headers
        conn.putrequest("POST", "/v2/models/yolo/infer")
        conn.putheader("Content-Length", str(limit + 1))
        conn.putheader("Content-Type", "application/octet-stream")
        conn.endheaders()
        response = conn.getresponse()
        status, body = response.status, response.read().decode()
    finally:
        conn.close()
    assert status == 413 and f"larger than {limit} bytes" in body
    # gRPC: a real message 1 MiB above the limit, refused by nginx with grpc-status 8.
    client = grpcclient.InferenceServerClient(stack.endpoints["grpcs"].removeprefix("grpcs://"), ssl=True,
                                              root_certificates=str(stack.ca_cert))
    image = grpcclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[b"\xff" * (limit + 2**20)]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("yolo", [image], client_timeout=60)
    client.close()
    assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED" and str(limit) in refused.value.message()
    logs = docker("logs", "--since", f"{since:.3f}", stack.container("triton-cpu"))
    assert (logs.stdout + logs.stderr).strip() == ""  # Triton never saw either request
    assert _failures(stack) == failures
    assert stack.serving()


def test_plain_text_and_untrusted_clients_are_refused(stack: LiveStack, tmp_path: Path) -> None:
    image = probe_image()
    plain_grpc = stack.endpoints["grpcs"].replace("grpcs://", "grpc://")
    with pytest.raises(TlsError, match="speaks TLS"), DetectionClient(plain_grpc, timeout_s=10) as client:
        client.detect(image)
    host, port = _https(stack)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("POST", "/v2/models/yolo/infer", body=b"{}")
        response = conn.getresponse()
        assert response.status == 400 and b"plain HTTP request was sent to HTTPS port" in response.read()
    finally:
        conn.close()
    other_ca, _ = make_ca(tmp_path / "other-ca")
    for scheme in ("grpcs", "https"):
        for ca in (other_ca, None):  # a CA that did not sign it; the system's trust store
            with pytest.raises(TlsError, match="not signed by a CA"), \
                    DetectionClient(stack.endpoints[scheme], ca_cert=ca, timeout_s=10) as client:
                client.detect(image)


@pytest.mark.parametrize("service", SERVICES)
def test_containers_run_read_only_as_non_root_without_capabilities(stack: LiveStack, service: str) -> None:
    assert stack.inspect(service, "{{.HostConfig.ReadonlyRootfs}} {{.HostConfig.CapDrop}}") == "true [ALL]"
    assert "no-new-privileges:true" in stack.inspect(service, "{{.HostConfig.SecurityOpt}}")
    assert stack.exec(service, "id", "-u").stdout.strip() not in ("", "0")
    write = stack.exec(service, "sh", "-c", "echo x > /written-by-the-test")
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    # Even uid 0 inside holds no capability: setting the hostname (CAP_SYS_ADMIN) is refused (EPERM, which the
    # hostname tool words as "you must be root").
    privileged = stack.exec(service, "hostname", "changed-by-the-test", user="0")
    assert privileged.returncode != 0 and ("must be root" in privileged.stderr or "not permitted" in privileged.stderr)
    assert stack.exec(service, "hostname").stdout.strip() != "changed-by-the-test"
    status = dict(line.split(":", 1) for line in stack.exec(service, "cat", "/proc/1/status").stdout.splitlines()
                  if ":" in line)
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and status["NoNewPrivs"].strip() == "1"
