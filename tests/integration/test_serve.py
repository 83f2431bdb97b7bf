"""`python -m generator serve` hardened like deploy: admin APIs restricted, clients served without the key."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clients import DetectionClient, RestrictedApiError
from generator.server.hardening import ADMIN_API_GROUPS
from generator.server.ports import free_port
from generator.synthetic import encode, make_scene
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.integration

KEY_LINE = r"Admin APIs \((?P<groups>[^)]*)\) are restricted; token \(header 'admin-key', .*\): (?P<key>[0-9a-f]{64})$"


@pytest.fixture(scope="module")
def served(demo_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, str]]:
    serve = ServeProcess([demo_repository], log_file=tmp_path_factory.mktemp("serve") / "serve.log",
                         env={"TRITON_ADMIN_TOKEN": ""})
    try:
        serve.wait_for(r"^Triton 2\.51\.0 ready: .*models: yolo, yolo_detector, yolo_nms, yolo_preprocess$")
        match = serve.wait_for(KEY_LINE)
        assert match["groups"].split(", ") == list(ADMIN_API_GROUPS)
        yield serve, match["key"]
    finally:
        serve.stop()


def status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture(scope="module")
def image() -> bytes:
    return encode(make_scene(np.random.default_rng(3), 640, 480).image, ".jpg")


def test_admin_apis_need_the_printed_key(served) -> None:
    serve, key = served
    config = f"http://{serve.http_url}/v2/models/yolo/config"
    assert status(config) == 403
    assert status(config, {"admin-key": "0" * 64}) == 403
    assert status(config, {"admin-key": key}) == 200
    assert status(f"http://{serve.http_url}/v2/models/yolo") == 200  # metadata stays open
    assert status(f"http://{serve.http_url}/v2/models/yolo/ready") == 200  # health too


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_clients_infer_without_the_key_and_read_names_with_it(served, image, protocol) -> None:
    serve, key = served
    url = f"{protocol}://{serve.grpc_url if protocol == 'grpc' else serve.http_url}"
    with DetectionClient(url) as anonymous, DetectionClient(url, admin_key=key) as admin:
        plain, named = anonymous.detect(image), admin.detect(image)
        assert len(plain) > 0 and plain.class_ids.tolist() == named.class_ids.tolist()
        assert anonymous.model_info.class_names == () and admin.model_info.max_batch_size == 8
        assert [d.class_name for d in plain] == [f"class_{d.class_id}" for d in named]
        assert [d.class_name for d in named] == [admin.model_info.class_names[d.class_id] for d in named]
    with DetectionClient(url, admin_key="0" * 64) as wrong, pytest.raises(RestrictedApiError, match="restricted"):
        wrong.detect(image)


def test_key_from_the_environment_is_used_and_not_printed(demo_repository: Path, tmp_path: Path) -> None:
    key = "k" * 40
    serve = ServeProcess([demo_repository], env={"TRITON_ADMIN_TOKEN": key}, log_file=tmp_path / "serve.log")
    try:
        serve.wait_for(r"are restricted to the token in TRITON_ADMIN_TOKEN \(header 'admin-key'")
        assert status(f"http://{serve.http_url}/v2/models/yolo/config", {"admin-key": key}) == 200
    finally:
        assert serve.stop() == 0
    assert not [line for line in serve.lines if key in line]
    assert serve.lines[-1] == "Triton stopped (exit code 0)."


def test_bad_key_in_the_environment_is_one_line(demo_repository: Path, tmp_path: Path) -> None:
    serve = ServeProcess([demo_repository], env={"TRITON_ADMIN_TOKEN": "secret"})
    assert serve.process.wait(60) == 1
    serve.stop()
    assert serve.lines == ["error: TRITON_ADMIN_TOKEN must be 16-256 characters of A-Z a-z 0-9 . _ ~ - "
                           "(e.g. `openssl rand -hex 32`); got one that is not"]


def test_a_second_server_takes_a_free_watchdog_port_and_prints_it(demo_repository: Path, tmp_path: Path) -> None:
    from tests.generator.operate.test_serve import _held_pair

    metrics_port, holder = _held_pair()  # metrics + 1, the derived watchdog port, is another server's
    with holder:
        serve = ServeProcess([demo_repository], log_file=tmp_path / "serve.log", watchdog_port=None,
                             ports=(free_port(), free_port(), metrics_port))
        try:
            ready = serve.wait_for(r"^Triton 2\.51\.0 ready: .*, watchdog metrics 127\.0\.0\.1:(?P<port>\d+); ")
            serve.watchdog_port = int(ready["port"])
            assert serve.watchdog_port != metrics_port + 1
            assert serve.watchdog_metrics()["triton_watchdog_server_starts_total"] == 1
        finally:
            assert serve.stop() == 0


def test_waiting_on_a_server_that_exits_prints_its_error_line_at_once(demo_repository: Path, tmp_path: Path) -> None:
    from generator.errors import ServerError
    from generator.server.startup import wait_for_pid
    from tests.generator.operate.test_serve import _held_pair

    metrics_port, holder = _held_pair()
    with holder:
        log = tmp_path / "triton.log"
        serve = ServeProcess([demo_repository], log_file=log, watchdog_port=metrics_port + 1,
                             ports=(free_port(), free_port(), metrics_port))
        try:
            with pytest.raises(ServerError, match=r"^generator serve exited before it was ready: error: cannot serve "
                                                  rf"the watchdog metrics on 127\.0\.0\.1:{metrics_port + 1}: "):
                wait_for_pid(serve.process.pid, [f"http://{serve.http_url}/v2/health/ready"], log, timeout_s=300,
                             what="generator serve")
        finally:
            serve.stop()
