"""Shared fixtures: a real embedded Triton 2.51 serving the demo ensemble (never a mock)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.hardening import AdminAccess, admin_access
from generator.server.ports import free_port
from tests.helpers import fix_batch


@dataclass(frozen=True)
class TritonTestServer:
    http_url: str
    grpc_url: str
    metrics_url: str
    model_name: str  # dynamic-batch demo ensemble
    onnx_path: Path
    static_model_name: str  # the same detector with a fixed batch of 1, float tensors and the full head between steps
    static_onnx_path: Path
    repository: Path
    log_file: Path
    admin: AdminAccess  # the admin API groups are restricted, as `python -m generator serve` and deploy do

    @property
    def admin_key(self) -> str:
        return self.admin.token


@pytest.fixture(scope="session")
def demo_onnx() -> Path:
    # TDE_TEST_ONNX points the integration tests at another detector (e.g. your own export).
    path = Path(os.environ.get("TDE_TEST_ONNX", DEMO_ONNX))
    if not path.exists():
        pytest.fail(f"the detector for the integration tests is missing: {path}")
    return path


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory, demo_onnx: Path) -> Iterator[TritonTestServer]:
    root = tmp_path_factory.mktemp("triton")
    static_onnx = fix_batch(demo_onnx, root / "demo_static_b1.onnx", 1)
    dynamic_repo, static_repo = root / "repo_dynamic", root / "repo_static"
    # The default queue budget (derived from the service time the build measures): the isolation, hostile-input
    # and bench tests must see what a user's default build does, so a budget that sheds normal load fails them.
    # A queue delay lets the concurrent-request tests form real batches.
    build_repository(demo_onnx, dynamic_repo, BuildOptions(name="yolo", max_batch=8, queue_delay_us=5000))
    # The static model also covers the float-tensor path (normalisation in the Python step) and the full
    # v8 head between the steps (the dynamic one sends the reduced head, the default).
    build_repository(static_onnx, static_repo,
                     BuildOptions(name="yolo_static", max_batch=4, normalise_in="preprocess", reduce_head=False))
    log_file = root / "tritonserver.log"
    admin = admin_access(environ={})  # a fresh random key, like `generator serve` without TRITON_ADMIN_TOKEN
    server = EmbeddedServer(
        dynamic_repo, free_port(), free_port(), free_port(), log_file=log_file,
        # Latency quantiles as deploy turns them on: the alert-rule test reads the p95 (test_alert_rules.py).
        extra_args=(f"--model-repository={static_repo}", "--metrics-config=summary_latencies=true"), admin=admin,
    )
    try:
        server.start()
        server.wait_ready(180)
    except Exception:
        server.stop()
        print(log_file.read_text()[-5000:] if log_file.exists() else "no server log")
        raise
    try:
        yield TritonTestServer(
            http_url=server.http_url,
            grpc_url=server.grpc_url,
            metrics_url=server.metrics_url,
            model_name="yolo",
            onnx_path=demo_onnx,
            static_model_name="yolo_static",
            static_onnx_path=static_onnx,
            repository=dynamic_repo,
            log_file=log_file,
            admin=admin,
        )
    finally:
        server.stop()
