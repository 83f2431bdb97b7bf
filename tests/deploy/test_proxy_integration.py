"""The rendered pod with a REAL Triton 2.51 behind Debian's nginx: TLS, size limits, overhead.

Triton has no gRPC message limit and 2.51 none for HTTP: without the proxy a 512 MB "image" is received,
copied into the preprocess stub and rejected only after 13.4 s (gRPC) / 5.5 s (HTTP) while the server's
process tree grows from 287 MB to 3.3 GB. Behind the proxy an oversized request never reaches Triton.
"""

from __future__ import annotations

import statistics
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from deploy import sizing

from .pod import REPO, TOKEN, Pod

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def jpeg() -> bytes:
    from generator.synthetic import encode, make_scene

    return encode(make_scene(np.random.default_rng(3), 640, 480).image)


def _failures(pod: Pod) -> float:
    """Triton's own count of failed ensemble requests: a refused request must never reach it."""
    url = f"http://127.0.0.1:{pod.settings.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("nv_inference_request_failure{") and f'model="{pod.settings.model_name}"' in line)


def _client(pod: Pod, protocol: str) -> object:
    from clients import DetectionClient

    url = pod.grpcs_url if protocol == "grpc" else pod.https_url
    return DetectionClient(url, model=pod.settings.model_name, timeout_s=30, client_options=pod.tls_options(protocol))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_normal_traffic_passes_through_tls_with_the_project_clients(pod: Pod, jpeg: bytes, protocol: str) -> None:
    from clients import DetectionClient

    with _client(pod, protocol) as proxied:  # type: ignore[attr-defined]
        through_proxy = proxied.detect(jpeg)
    direct_url = f"{protocol}://{pod.direct_grpc if protocol == 'grpc' else pod.direct_http}"
    with DetectionClient(direct_url, model=pod.settings.model_name, timeout_s=30) as direct:
        assert through_proxy == direct.detect(jpeg)
    assert through_proxy, "the scene has objects: the comparison must not be between two empty answers"


def test_tls_is_required_and_verified(pod: Pod, jpeg: bytes) -> None:
    from clients import DetectionClient, TlsError

    # Plain gRPC to the TLS port, and TLS without trusting the self-signed certificate: both refused, by cause,
    # with the library's own words kept in the exception chain.
    with pytest.raises(TlsError) as plain_error, DetectionClient(
            f"grpc://127.0.0.1:{pod.settings.proxy_grpc_port}", model="yolo", timeout_s=5) as plain:
        plain.detect(jpeg)
    with pytest.raises(TlsError) as untrusted_error, DetectionClient(
            pod.grpcs_url, model="yolo", timeout_s=5) as untrusted:
        untrusted.detect(jpeg)
    assert "not signed by a CA this client trusts" in str(untrusted_error.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(untrusted_error.value.__cause__)
    assert "speaks TLS" in str(plain_error.value) and "HTTP/2" in str(plain_error.value.__cause__)
    # Trusting the proxy's certificate with ca_cert=: both protocols answer.
    for url in (pod.grpcs_url, pod.https_url):
        with DetectionClient(url, model="yolo", timeout_s=30, ca_cert=pod.ca) as trusted:
            assert trusted.detect(jpeg) is not None


def _oversized_grpc(pod: Pod, payload: np.ndarray) -> tuple[object, float]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"localhost:{pod.settings.proxy_grpc_port}", ssl=True,
                                              root_certificates=str(pod.ca))
    tensor = grpcclient.InferInput("IMAGE", list(payload.shape), "BYTES")
    tensor.set_data_from_numpy(payload)
    started = time.perf_counter()
    try:
        client.infer(pod.settings.model_name, [tensor], client_timeout=60)
    except InferenceServerException as exc:
        return exc, time.perf_counter() - started
    finally:
        client.close()
    return None, time.perf_counter() - started


def _oversized_http(pod: Pod, payload: np.ndarray) -> tuple[object, float]:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(f"localhost:{pod.settings.proxy_http_port}", ssl=True,
                                              ssl_options={"ca_certs": str(pod.ca)}, network_timeout=60)
    tensor = httpclient.InferInput("IMAGE", list(payload.shape), "BYTES")
    tensor.set_data_from_numpy(payload, binary_data=True)
    started = time.perf_counter()
    try:
        client.infer(pod.settings.model_name, [tensor])
    except InferenceServerException as exc:
        return exc, time.perf_counter() - started
    finally:
        client.close()
    return None, time.perf_counter() - started


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_oversized_request_is_refused_at_the_proxy(pod: Pod, jpeg: bytes, protocol: str) -> None:
    """96 MiB in one image: refused by nginx (RESOURCE_EXHAUSTED / 413); Triton never sees it or grows."""
    from tritonclient.utils import InferenceServerException

    limit = sizing.max_request_bytes(pod.settings)
    payload = np.array([[b"\xff\xd8" + bytes(96 * MIB)]], dtype=np.object_)
    failures, rss = _failures(pod), pod.triton_tree_rss()
    send = _oversized_grpc if protocol == "grpc" else _oversized_http
    error, seconds = send(pod, payload)
    assert isinstance(error, InferenceServerException), "an oversized request went through"
    expected = "StatusCode.RESOURCE_EXHAUSTED" if protocol == "grpc" else "413"
    assert str(error.status()) == expected
    assert f"larger than {limit} bytes" in str(error.message())
    assert _failures(pod) == failures  # Triton did not receive it
    grown = pod.triton_tree_rss() - rss
    assert grown < 64 * MIB, f"Triton's processes grew by {grown / MIB:.0f} MiB"
    print(f"\n{protocol}: 96 MiB refused in {seconds * 1000:.0f} ms (client included), Triton grew {grown / MIB:.1f} MiB")
    with _client(pod, protocol) as client:  # type: ignore[attr-defined]
        assert client.detect(jpeg)  # and the server keeps serving


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_limit_admits_a_full_batch_of_maximum_images_and_nothing_more(pod: Pod, protocol: str) -> None:
    """At the boundary: max_batch images of max_image_bytes reach Triton; a little more does not."""
    from tritonclient.utils import InferenceServerException

    s = pod.settings
    send = _oversized_grpc if protocol == "grpc" else _oversized_http
    largest = np.array([[bytes(s.max_image_bytes)] for _ in range(s.max_batch)], dtype=np.object_)
    error, _ = send(pod, largest)
    # Triton's preprocess answers (these bytes are no image): the proxy let the request through.
    assert isinstance(error, InferenceServerException) and "invalid image" in str(error.message())
    over = np.array([[bytes(s.max_image_bytes + 16 * 1024)] for _ in range(s.max_batch)], dtype=np.object_)
    error, _ = send(pod, over)
    assert isinstance(error, InferenceServerException) and "larger than" in str(error.message())


def test_admin_apis_are_not_routed_by_the_proxy_and_stay_restricted_inside_the_pod(pod: Pod) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    key = {"triton-grpc-protocol-admin-key": TOKEN}
    client = grpcclient.InferenceServerClient(f"localhost:{pod.settings.proxy_grpc_port}", ssl=True,
                                              root_certificates=str(pod.ca))
    with pytest.raises(InferenceServerException, match="not served here"):  # the public port: not even with the key
        client.get_model_repository_index(headers=key)
    client.close()
    inside = grpcclient.InferenceServerClient(pod.direct_grpc)  # Triton's loopback, where operators and rollouts go
    with pytest.raises(InferenceServerException, match="restricted"):
        inside.get_model_repository_index()
    assert inside.get_model_repository_index(headers=key) is not None
    inside.close()


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_proxy_latency_overhead_paired(pod: Pod, jpeg: bytes, protocol: str) -> None:
    """Direct and proxied requests alternate, so drift on this shared machine hits both alike."""
    from clients import DetectionClient

    pairs = 300
    direct_url = f"{protocol}://{pod.direct_grpc if protocol == 'grpc' else pod.direct_http}"
    with DetectionClient(direct_url, model="yolo", timeout_s=30) as direct, \
            _client(pod, protocol) as proxied:  # type: ignore[attr-defined]
        for client in (direct, proxied):  # warm up connections, TLS sessions and the models
            for _ in range(20):
                client.detect(jpeg)
        times: dict[str, list[float]] = {"direct": [], "proxied": []}
        for i in range(pairs):
            order = (("direct", direct), ("proxied", proxied)) if i % 2 else (("proxied", proxied), ("direct", direct))
            for name, client in order:
                started = time.perf_counter()
                client.detect(jpeg)
                times[name].append((time.perf_counter() - started) * 1000)
    deltas = [p - d for p, d in zip(times["proxied"], times["direct"], strict=True)]
    p50 = {name: statistics.median(values) for name, values in times.items()}
    overhead = statistics.median(deltas)
    print(f"\n{protocol}: {pairs} pairs, p50 direct {p50['direct']:.2f} ms, proxied {p50['proxied']:.2f} ms, "
          f"median paired overhead {overhead:.2f} ms, mean {statistics.fmean(deltas):.2f} ms")
    assert overhead < 10.0, f"the proxy adds {overhead:.1f} ms per request"


@pytest.mark.slow
@pytest.mark.parametrize(("user", "scheme"), [("GrpcDetectionUser", "grpcs"), ("HttpDetectionUser", "https")])
def test_the_rendered_locust_users_load_the_pod_through_the_proxy(pod: Pod, tmp_path: Path, user: str,
                                                                   scheme: str) -> None:
    """What compose and the Kubernetes Jobs run: the project's Locust users, TLS verified with the proxy's cert."""
    import csv
    import os
    import subprocess
    import sys

    port = pod.settings.proxy_grpc_port if scheme == "grpcs" else pod.settings.proxy_http_port
    env = {**os.environ, "LOADTEST_MODEL": pod.settings.model_name, "LOADTEST_CA_CERT": str(pod.ca),
           "LOADTEST_IMAGES_PER_SIZE": "1"}
    locust = Path(sys.executable).parent / "locust"
    result = subprocess.run(
        [str(locust), "-f", str(REPO / "loadtest" / "locustfile.py"), user, "--headless", "--users", "2",
         "--spawn-rate", "2", "--run-time", "6s", f"--host={scheme}://localhost:{port}", "--csv", str(tmp_path / "run"),
         "--only-summary"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    rows = {row["Name"]: row for row in csv.DictReader((tmp_path / "run_stats.csv").open())}
    total = rows["Aggregated"]
    assert int(total["Request Count"]) > 10 and int(total["Failure Count"]) == 0, result.stderr[-2000:]
    print(f"\n{user} via {scheme}: {total['Request Count']} requests, median {total['Median Response Time']} ms")


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_the_stream_client_goes_through_the_proxy_with_its_ca_certificate(pod: Pod, tmp_path: Path,
                                                                          scheme: str) -> None:
    """``python -m clients.stream --ca-cert``: a video file's frames through TLS, verified with the proxy's cert."""
    import json
    import subprocess
    import sys

    from tests.integration.rtsp import write_scene_video

    video = write_scene_video(tmp_path / "clip.mp4", 8, seed=11, fps=10)
    port = pod.settings.proxy_grpc_port if scheme == "grpcs" else pod.settings.proxy_http_port
    result = subprocess.run(
        [sys.executable, "-m", "clients.stream", f"clip={video}", "--url", f"{scheme}://localhost:{port}",
         "--ca-cert", str(pod.ca), "--model", pod.settings.model_name, "--timeout", "30", "--in-flight", "2",
         "--summary-json", str(tmp_path / "summary.json")],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    (summary,) = json.loads((tmp_path / "summary.json").read_text())["streams"]
    assert summary["answered"] >= 4 and summary["failed"] == 0, summary
    assert len(result.stdout.splitlines()) == summary["answered"]
