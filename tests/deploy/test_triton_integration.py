"""The rendered Triton command line and the health check against a REAL Triton 2.51 (embedded server).

The embedded server is the same tritonserver the NGC images ship, two years older: every rendered flag
except --http-max-input-size (added after 2.51) is passed verbatim, so the restricted-API syntax, the
header names the README documents, and the health check's inference request are proven here.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy import healthcheck
from deploy.render import triton_args
from deploy.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "integration-admin-token"
# Ports for servers this module starts: 19700-19799, inside the range set aside for test servers.
PORT_RANGE = range(19700, 19800)
# Flags the embedded server sets itself, and the one flag Triton 2.51 does not know yet.
_NOT_PASSED = ("tritonserver", "--model-repository=", "--http-port=", "--grpc-port=", "--metrics-port=",
               "--http-max-input-size=")


def _free_ports(count: int) -> list[int]:
    ports = []
    for port in PORT_RANGE:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    pytest.fail(f"no {count} free ports in {PORT_RANGE}")


@dataclass(frozen=True)
class Served:
    http_url: str
    grpc_url: str
    pid: int


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from generator.builder.options import BuildOptions
    from generator.builder.pipeline import build_repository
    from tests.generator.onnx_factory import make_detector, save, ultralytics_metadata

    root = tmp_path_factory.mktemp("deploy-triton")
    onnx_path = save(make_detector(metadata=ultralytics_metadata()), root / "tiny.onnx")
    build_repository(onnx_path, root / "repo", BuildOptions(name=Settings().model_name, max_batch=2))
    return root / "repo"


@contextmanager
def _start(repository: Path, log_file: Path) -> Iterator[Served]:
    from generator.server.embedded import EmbeddedServer

    extra = tuple(a for a in triton_args(Settings(), gpu=False, token=TOKEN) if not a.startswith(_NOT_PASSED))
    http, grpc, metrics = _free_ports(3)
    server = EmbeddedServer(repository, http, grpc, metrics, log_file=log_file, extra_args=extra)
    try:
        server.start()
        server.wait_ready(180)
        assert server.process is not None
        yield Served(server.http_url, server.grpc_url, server.process.pid)
    except Exception:
        print(log_file.read_text()[-4000:] if log_file.exists() else "no server log")
        raise
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with _start(repository, tmp_path_factory.mktemp("deploy-log") / "tritonserver.log") as server:
        yield server


def _http(served: Served, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(f"http://{served.http_url}{path}", method=method, headers=headers or {},
                                     data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _healthcheck_argv(served: Served, models: str | None = None) -> list[str]:
    s = Settings()
    return ["--url", served.http_url, "--ensemble", s.model_name, "--models", models or ",".join(s.composing_models)]


def test_health_check_passes_on_a_serving_ensemble(served: Served) -> None:
    assert healthcheck.main(_healthcheck_argv(served)) == 0
    assert healthcheck.check_inference(served.http_url, Settings().model_name, 10.0) >= 0


def test_health_check_fails_when_a_model_is_missing(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert healthcheck.main(_healthcheck_argv(served, "yolo_preprocess,yolo_detector,yolo_postprocess")) == 1
    assert "yolo_postprocess is not ready" in capsys.readouterr().err


def test_health_check_fails_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = _free_ports(1)
    assert healthcheck.main(["--url", f"127.0.0.1:{port}", "--ensemble", "yolo", "--models", "yolo_nms"]) == 1
    assert "cannot reach Triton" in capsys.readouterr().err


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
def test_http_admin_apis_need_the_admin_header(served: Served, method: str, path: str) -> None:
    assert _http(served, method, path) == 403
    assert _http(served, method, path, {"admin-key": "wrong"}) == 403
    assert _http(served, method, path, {"admin-key": TOKEN}) == 200


def test_health_metadata_and_inference_stay_open(served: Served) -> None:
    assert _http(served, "GET", "/v2/health/ready") == 200
    assert _http(served, "GET", "/v2/models/yolo/ready") == 200
    assert _http(served, "GET", "/v2") == 200


def test_grpc_admin_protocols_need_the_prefixed_admin_header(served: Served) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(served.grpc_url)
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


def _stub_pids(server_pid: int, model: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process(server_pid).children(recursive=True)
            if any(model in part for part in p.cmdline())]


@pytest.mark.slow
def test_a_dead_python_stub_fails_the_health_check(repository: Path, tmp_path: Path) -> None:
    """Triton 2.51 keeps /v2/health/ready green after a stub dies; the health check must not."""
    with _start(repository, tmp_path / "tritonserver.log") as served:
        assert healthcheck.main(_healthcheck_argv(served)) == 0
        stubs = _stub_pids(served.pid, "yolo_preprocess")
        assert stubs, "no Python-backend stub process found for yolo_preprocess"
        for pid in stubs:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while healthcheck.main(_healthcheck_argv(served)) == 0 and time.monotonic() < deadline:
            time.sleep(1)
        assert healthcheck.main(_healthcheck_argv(served)) == 1
        # Observed on 2.51: both stay 200, which is why the check runs a real inference.
        print(f"after the stub died: /v2/health/ready HTTP {_http(served, 'GET', '/v2/health/ready')}, "
              f"/v2/models/yolo_preprocess/ready HTTP {_http(served, 'GET', '/v2/models/yolo_preprocess/ready')}")
