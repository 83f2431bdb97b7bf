"""The rendered Triton command line against a REAL Triton 2.51 (the embedded server), inside the pod.

The embedded server is the same tritonserver the NGC images ship, older: every rendered flag except
--http-max-input-size (added in 2.59; the proxy enforces the same limit) is passed verbatim, so the
restricted-API syntax, the header names the README documents and the loopback-only listeners are proven here.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from .pod import TOKEN, Pod

pytestmark = pytest.mark.integration


def _http(pod: Pod, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(f"http://{pod.direct_http}{path}", method=method, headers=headers or {},
                                     data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/repository/index"),          # model-repository
        ("GET", "/v2/models/yolo/config"),         # model-config
        ("GET", "/v2/systemsharedmemory/status"),  # shared-memory
        ("GET", "/v2/models/stats"),               # statistics
        ("GET", "/v2/trace/setting"),              # trace
        ("GET", "/v2/logging"),                    # logging
    ],
)
def test_http_admin_apis_need_the_admin_header(pod: Pod, method: str, path: str) -> None:
    assert _http(pod, method, path) == 403
    assert _http(pod, method, path, {"admin-key": "wrong"}) == 403
    assert _http(pod, method, path, {"admin-key": TOKEN}) == 200


def test_health_metadata_and_inference_stay_open(pod: Pod) -> None:
    assert _http(pod, "GET", "/v2/health/ready") == 200
    assert _http(pod, "GET", "/v2/models/yolo/ready") == 200
    assert _http(pod, "GET", "/v2") == 200


def test_grpc_admin_protocols_need_the_prefixed_admin_header(pod: Pod) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(pod.direct_grpc)
    header = {"triton-grpc-protocol-admin-key": TOKEN}
    calls = {
        "model-repository": lambda h: client.get_model_repository_index(headers=h),
        "model-config": lambda h: client.get_model_config("yolo", headers=h),
        "shared-memory": lambda h: client.get_system_shared_memory_status(headers=h),
        "statistics": lambda h: client.get_inference_statistics(headers=h),
        "trace": lambda h: client.get_trace_settings(headers=h),
        "logging": lambda h: client.get_log_settings(headers=h),
    }
    for group, call in calls.items():
        with pytest.raises(InferenceServerException, match="restricted"):
            call(None)
        with pytest.raises(InferenceServerException, match="restricted"):
            call({"admin-key": TOKEN})  # the HTTP spelling is not enough on gRPC
        assert call(header) is not None, group
    assert client.is_server_ready() and client.is_model_ready("yolo_nms")


def _listening_addresses(port: int) -> set[str]:
    """Listening addresses of ``port``; IPv4-mapped IPv6 (Triton's gRPC: ::ffff:127.0.0.1) read as IPv4."""
    import ipaddress

    import psutil

    found = set()
    for conn in psutil.net_connections("tcp"):
        if conn.status == "LISTEN" and conn.laddr and conn.laddr.port == port:
            address = ipaddress.ip_address(conn.laddr.ip)
            mapped = getattr(address, "ipv4_mapped", None)
            found.add(str(mapped or address))
    return found


def test_triton_listens_on_loopback_only_and_the_proxy_on_every_interface(pod: Pod) -> None:
    """The rendered --http-address/--grpc-address: only what shares the network namespace (the proxy) connects."""
    for port in (pod.settings.http_port, pod.settings.grpc_port):
        assert _listening_addresses(port) == {"127.0.0.1"}, port
    for port in (pod.settings.proxy_http_port, pod.settings.proxy_grpc_port):
        assert _listening_addresses(port) == {"0.0.0.0"}, port
