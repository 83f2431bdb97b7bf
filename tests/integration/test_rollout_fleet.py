"""The rollout Job's ``--fleet`` on two real embedded Tritons serving one versioned repository (the Kubernetes
pods on the shared claim): the candidate loaded on both, both servers' traffic in the window, promoted on both, then
a manual rollback on both; steady load on each server with no failed request."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.canary import Route, read_route, write_route
from generator.builder.spec.options import BuildOptions
from generator.builder.versioned import add_version
from generator.operate.admin import ModelControl
from generator.operate.fleet import FleetControl
from generator.operate.rollout import workflow
from generator.operate.rollout.arguments import control_images
from generator.operate.rollout.mirror import mirror
from generator.operate.rollout.workflow import RolloutSettings, rollback, rollout
from generator.repository.versions import ROUTE_NAME, read_index
from tests.integration.rollout_load import KEY, WINDOW_S, SteadyLoad, rollout_scenes
from tests.integration.serve_process import ServeProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scenes() -> list[bytes]:
    return rollout_scenes()


@pytest.fixture()
def two_servers(tmp_path: Path, demo_onnx: Path) -> Iterator[tuple[Path, list[ServeProcess]]]:
    repository = tmp_path / "repository"
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    write_route(repository / ROUTE_NAME, Route("yolo"))
    servers: list[ServeProcess] = []
    try:
        for n in range(2):
            servers.append(ServeProcess([repository], "--model-control", "explicit", env={"TRITON_ADMIN_TOKEN": KEY},
                                        log_file=tmp_path / f"serve-{n}.log"))
        for serve in servers:
            serve.wait_for(r"^Triton 2\.51\.0 ready: ")
        yield repository, servers
    finally:
        for serve in servers:
            serve.stop()


def _one(serve: ServeProcess) -> ModelControl:
    return ModelControl(serve.http_url, f"127.0.0.1:{serve.metrics_port}", KEY)


def test_the_fleet_rollout_promotes_on_every_server_and_the_rollback_reaches_every_server(
        two_servers, demo_onnx, scenes, monkeypatch) -> None:
    repository, servers = two_servers
    fleet = FleetControl(lambda: [(s.http_url, f"127.0.0.1:{s.metrics_port}") for s in servers], KEY)
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    mirrored: list[tuple[str, tuple[str, ...], str | None]] = []  # each mirror's URL and models, the canary routed

    def spy(url: str, models: tuple[str, ...], images: tuple[bytes, ...], timeout_s: float = 30.0) -> object:
        mirrored.append((url, tuple(models), read_route(repository / ROUTE_NAME).canary))
        return mirror(url, models, images, timeout_s)

    monkeypatch.setattr(workflow, "mirror", spy)
    # A short window: latency is judged from paired probes over the window itself, not from Triton's 60 s
    # summaries (with those, two servers loading the candidate on 2 cores made the canary's p95 the busy seconds
    # against the stable side's calmer minute, and CI rolled a healthy candidate back at 8 s: 219 against 143 ms).
    settings = RolloutSettings(repository, fleet, f"http://{servers[0].http_url}", control_images(None),
                               canary_percent=25, window_s=WINDOW_S)
    loads = [SteadyLoad(s.grpc_url, repository / ROUTE_NAME, scenes) for s in servers]
    with loads[0], loads[1]:
        time.sleep(1.0)
        started = time.monotonic()
        record = rollout(settings)
        promoted_s = time.monotonic() - started
        # Here, not after the manual rollback below, which has nothing to undo if the candidate was rolled back.
        assert record["action"] == "promote", json.dumps(record["checks"], indent=1)
        after_promotion = [_one(s).loaded() for s in servers]
        time.sleep(1.0)
        manual = rollback(repository, fleet)
        time.sleep(1.0)
    print(f"\nfleet of 2: promotion {promoted_s:.1f} s ({record['timings']}), "
          f"{[load.counts for load in loads]}, window: canary {record['canary']['requests']} requests "  # type: ignore[index]
          f"(share {record['observed_canary_share']} %)")
    assert record["action"] == "promote", json.dumps(record["checks"], indent=1)
    # The candidate warmed on each server by itself before any route named it (the clients' URL is one server's).
    assert mirrored[:2] == [(f"http://{s.http_url}", ("yolo_v2",), None) for s in servers], mirrored
    for load in loads:
        assert load.errors == [], load.errors[:5]
        assert load.counts.get("yolo_v2", 0) > 0  # each server took canary traffic ...
    canary = record["canary"]
    assert isinstance(canary, dict)
    # ... and the window counted both: more users' canary requests than one server alone could have given it (all
    # its load's canary requests of the whole run; the rollout's own probes are taken out of the window)
    one_server_at_most = max(load.counts["yolo_v2"] for load in loads)
    assert canary["requests"] > one_server_at_most, (canary["requests"], one_server_at_most)
    for loaded in after_promotion:  # promoted on each: the old version retired everywhere
        assert "yolo" in loaded and not {"yolo_v1", "yolo_v1_nms"} & loaded
    assert manual["rolled_back"] == 2 and manual["stable"] == 1
    index = read_index(repository)
    assert index is not None and index.stable == 1
    for serve in servers:
        assert "yolo_v2" not in _one(serve).loaded() and "yolo" in _one(serve).loaded()
