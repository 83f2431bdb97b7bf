"""The front door (docs/SECURITY.md) with a REAL Triton 2.51 behind the rendered nginx (Debian's), fast lane.

Every reproducer of a crash or bypass fixed after 2.51 is refused by nginx with a JSON 4xx, Triton counts no
request for it and its process is the same one afterwards; what the cap lets through (nested JSON, duplicate
outputs and odd shapes at the cap's size) reaches Triton, which answers it and keeps serving. A Triton that is
down is a 503 with Retry-After (HTTP) and UNAVAILABLE (gRPC). The live lane replays the same list against the
compose stack with legitimate traffic running (live/test_front_door.py).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import numpy as np
import psutil
import pytest

from clients import DetectionClient
from deploy import screening
from deploy.render.files import NGINX_CONF

from . import front_door
from .pod import TOKEN, Pod, pod_settings, start_nginx, stop, wait_for_port

pytestmark = pytest.mark.integration


def _tritonserver(pod: Pod) -> tuple[int, float]:
    (server,) = [p for p in psutil.Process(pod.serve.pid).children(recursive=True) if p.name() == "tritonserver"]
    return server.pid, server.create_time()


def _jpeg() -> bytes:
    from generator.synthetic import encode, make_scene

    return encode(make_scene(np.random.default_rng(3), 640, 480).image)


def test_every_reproducer_is_refused_at_the_proxy_and_triton_never_sees_it(pod: Pod) -> None:
    port, ca = pod.settings.proxy_http_port, pod.ca
    server = _tritonserver(pod)
    answers = {name: send(port, ca) for name, send in front_door.reproducers()}
    wrong = {name: (a.status, a.body[:120]) for name, a in answers.items() if not 400 <= a.status < 500}
    assert wrong == {}, wrong
    errors = {name: a.error() for name, a in answers.items()}  # each a one-line JSON error, never nginx's HTML
    assert {a.headers["content-type"] for a in answers.values()} == {"application/json"}
    assert "larger than 4096 bytes" in errors["nested JSON 120 kB"] and "Content-Length" in errors["chunked flood"]
    assert answers["repository index"].status == 404 and answers["infer by GET"].status == 405
    assert answers["oversized header line"].status == 431
    # Each error is one the rendered config writes itself (nginx's `return`): Triton was never asked.
    assert front_door.from_the_proxy(answers, (pod.root / NGINX_CONF).read_text()) == {}
    assert _tritonserver(pod) == server, "tritonserver restarted"
    grpc = front_door.refused_grpc(pod.settings.proxy_grpc_port, ca)
    assert all(status.startswith("StatusCode.UNIMPLEMENTED: not served here") for status in grpc.values()), grpc
    with pod_client(pod) as client:
        assert client.detect(_jpeg())


def pod_client(pod: Pod) -> DetectionClient:
    return DetectionClient(pod.https_url, model=pod.settings.model_name, timeout_s=30, ca_cert=pod.ca)


def test_what_the_cap_lets_through_reaches_triton_which_answers_and_survives(pod: Pod) -> None:
    """At the cap: nested JSON, 150 duplicate outputs, overflowing and negative shapes. Triton 2.51 parses each."""
    port, ca, cap = pod.settings.proxy_http_port, pod.ca, screening.MAX_INFER_JSON_BYTES
    server = _tritonserver(pod)
    sent = {
        "nested JSON body at the cap": front_door.request(port, ca, "POST", "/v2/models/yolo/infer",
                                                          front_door.nested_json(cap)),
        "nested JSON header at the cap": front_door.binary_infer(port, ca, front_door.nested_json(cap)),
        "150 duplicate outputs": front_door.binary_infer(port, ca, front_door.many_outputs(150)),
        "negative shape": front_door.binary_infer(port, ca, front_door.infer_header(
            inputs=[{"name": "IMAGE", "shape": [-1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}])),
        "overflowing shape": front_door.binary_infer(port, ca, front_door.infer_header(
            inputs=[{"name": "IMAGE", "shape": [2**63 - 1, 2**63 - 1], "datatype": "BYTES",
                     "parameters": {"binary_data_size": 8}}])),
    }
    assert {name: a.status for name, a in sent.items() if a.status == 200} == {}
    errors = {name: a.error() for name, a in sent.items()}
    print("\n" + "\n".join(f"{name}: {a.status} {errors[name][:100]}" for name, a in sent.items()))
    # Triton's own words (the proxy's refusals name the cap or the route): these did reach it.
    assert not [e for e in errors.values() if "4096 bytes" in e or "not served here" in e], errors
    assert _tritonserver(pod) == server, "tritonserver restarted"
    with pod_client(pod) as client:
        assert client.detect(_jpeg())


def test_only_inference_health_and_metadata_are_routed(pod: Pod) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    port, ca = pod.settings.proxy_http_port, pod.ca
    for path in ("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/yolo", "/v2/models/yolo/ready",
                 "/v2/models/yolo/versions/1"):
        assert front_door.request(port, ca, "GET", path).status == 200, path
    # The model config stays routed for the clients' contract check; Triton's key still guards it.
    assert front_door.request(port, ca, "GET", "/v2/models/yolo/config").status == 403
    assert front_door.request(port, ca, "GET", "/v2/models/yolo/config", headers={"admin-key": TOKEN}).status == 200
    client = grpcclient.InferenceServerClient(f"localhost:{pod.settings.proxy_grpc_port}", ssl=True,
                                              root_certificates=str(ca))
    try:
        assert client.is_server_ready() and client.get_model_metadata("yolo").name == "yolo"
        with pytest.raises(InferenceServerException, match="not served here"):  # even with the key
            client.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": TOKEN})
    finally:
        client.close()


def test_tls_offers_aead_suites_only_and_sends_hsts(pod: Pod) -> None:
    import socket

    def handshake(ciphers: str) -> str | None:
        context = ssl.create_default_context(cafile=str(pod.ca))
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(ciphers)
        try:
            with socket.create_connection(("localhost", pod.settings.proxy_http_port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname="localhost") as tls:
                cipher = tls.cipher()
                return None if cipher is None else cipher[0]
        except ssl.SSLError:
            return None

    assert handshake("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA") is None  # CBC
    assert handshake("ECDHE-ECDSA-AES128-GCM-SHA256") == "ECDHE-ECDSA-AES128-GCM-SHA256"
    answer = front_door.request(pod.settings.proxy_http_port, pod.ca, "GET", "/v2/health/ready")
    assert answer.headers["strict-transport-security"] == "max-age=31536000"


def test_a_triton_that_is_down_is_a_503_with_retry_after_and_grpc_unavailable() -> None:
    """The rendered proxy with nothing listening behind it: what clients see while Triton restarts."""
    import shutil
    import tempfile

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    settings = pod_settings()  # Triton's ports are free ones nobody listens on
    root = Path(tempfile.mkdtemp(prefix="front-door-"))
    root.chmod(0o755)  # nginx runs as an unprivileged user, as in the pod
    nginx, ca = start_nginx(settings, root)
    try:
        wait_for_port(settings.proxy_http_port, nginx, "nginx")
        for method, path in (("POST", "/v2/models/yolo/infer"), ("GET", "/v2/health/ready")):
            answer = front_door.binary_infer(settings.proxy_http_port, ca, front_door.infer_header()) \
                if method == "POST" else front_door.request(settings.proxy_http_port, ca, method, path)
            assert answer.status == 503 and answer.headers["retry-after"] == str(screening.RETRY_AFTER_S)
            assert "unavailable" in answer.error()
        client = grpcclient.InferenceServerClient(f"localhost:{settings.proxy_grpc_port}", ssl=True,
                                                  root_certificates=str(ca))
        with pytest.raises(InferenceServerException) as error:
            client.is_server_ready()
        client.close()
        assert str(error.value.status()) == "StatusCode.UNAVAILABLE" and "retry after" in str(error.value.message())
    finally:
        stop(nginx, 3)  # SIGQUIT
        shutil.rmtree(root, ignore_errors=True)


def test_grpc_inference_with_many_outputs_or_odd_shapes_is_answered_and_triton_survives(pod: Pod) -> None:
    """gRPC carries no JSON to cap: 10,000 named outputs and overflowing shapes go to Triton 2.51, which answers."""
    port, ca = pod.settings.proxy_grpc_port, pod.ca
    server = _tritonserver(pod)
    answers = {
        "10,000 outputs": front_door.grpc_infer(port, ca, outputs=10_000),
        "negative shape": front_door.grpc_infer(port, ca, shape=(-1, 1)),
        "overflowing shape": front_door.grpc_infer(port, ca, shape=(2**63 - 1, 2**63 - 1)),
        "2^62 batch": front_door.grpc_infer(port, ca, shape=(2**62, 1)),
    }
    print("\n" + "\n".join(f"{name}: {answer[:120]}" for name, answer in answers.items()))
    assert all(a.startswith(("INVALID_ARGUMENT", "INTERNAL", "OK")) for a in answers.values()), answers
    assert _tritonserver(pod) == server, "tritonserver restarted"
    with pod_client(pod) as client:
        assert client.detect(_jpeg())


def test_slow_clients_are_cut_off_at_the_rendered_timeouts(pod: Pod) -> None:
    """Headers never finished, and a body that stops: nginx closes both at the rendered timeouts, in parallel."""
    import socket
    import threading
    import time

    def hold(head: bytes, results: dict[str, tuple[float, bytes]], name: str) -> None:
        context = ssl.create_default_context(cafile=str(pod.ca))
        with socket.create_connection(("localhost", pod.settings.proxy_http_port), timeout=60) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(head)
            started, data = time.monotonic(), b""
            while chunk := tls.recv(4096):
                data += chunk
            results[name] = (time.monotonic() - started, data)

    results: dict[str, tuple[float, bytes]] = {}
    heads = {"headers": b"POST /v2/models/yolo/infer HTTP/1.1\r\nHost: localhost\r\n",
             "body": b"POST /v2/models/yolo/infer HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"in"}
    threads = [threading.Thread(target=hold, args=(head, results, name)) for name, head in heads.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    header_s, _ = results["headers"]
    body_s, answer = results["body"]
    print(f"\nunfinished headers closed after {header_s:.1f} s, a stalled body after {body_s:.1f} s "
          f"({answer[:12]!r})")
    assert screening.CLIENT_HEADER_TIMEOUT_S - 1 <= header_s <= screening.CLIENT_HEADER_TIMEOUT_S + 10, header_s
    assert screening.CLIENT_BODY_TIMEOUT_S - 1 <= body_s <= screening.CLIENT_BODY_TIMEOUT_S + 10, body_s
    # The body streams to Triton as it comes (proxy_request_buffering off): nginx closes both sides, no answer.
    assert answer in (b"",) or answer.startswith(b"HTTP/1.1 408"), answer[:100]
