"""Versions side by side and the rollout on the real embedded Triton (`generator serve --model-control explicit`):
a healthy candidate promoted and a manual rollback, both under steady load without a failed request; a candidate
built to return nothing rolled back by the rollout itself. The time each took is printed (``-s``)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clients.canary import Route, read_route, write_route
from generator.builder.spec.options import BuildOptions
from generator.builder.versioned import add_version
from generator.operate.admin import ModelControl
from generator.operate.rollout import workflow
from generator.operate.rollout.arguments import control_images
from generator.operate.rollout.mirror import mirror
from generator.operate.rollout.workflow import RolloutSettings, rollback, rollout
from generator.repository.versions import ROUTE_NAME, read_index
from generator.synthetic import encode
from tests.integration.rollout_load import KEY, WINDOW_S, SteadyLoad, rollout_scenes
from tests.integration.serve_process import ROOT, ServeProcess

pytestmark = pytest.mark.integration
@pytest.fixture()
def versioned(tmp_path: Path, demo_onnx: Path) -> Iterator[tuple[Path, ServeProcess]]:
    repository = tmp_path / "repository"
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    write_route(repository / ROUTE_NAME, Route("yolo"))
    # The watchdog's probes (one empty image through the alias per interval) count on the stable side: the
    # default interval keeps them to a few of the window's requests.
    serve = ServeProcess([repository], "--model-control", "explicit",
                         env={"TRITON_ADMIN_TOKEN": KEY}, log_file=tmp_path / "serve.log")
    try:
        serve.wait_for(r"^Triton 2\.51\.0 ready: .*models: yolo, yolo_v1_detector, yolo_v1_nms, "
                       r"yolo_v1_preprocess$")
        yield repository, serve
    finally:
        serve.stop()


def settings(repository: Path, serve: ServeProcess) -> RolloutSettings:
    return RolloutSettings(repository, control(serve), f"http://{serve.http_url}", control_images(None),
                           canary_percent=25, window_s=WINDOW_S)


def control(serve: ServeProcess) -> ModelControl:
    return ModelControl(serve.http_url, f"127.0.0.1:{serve.metrics_port}", KEY)


@pytest.fixture(scope="module")
def scenes() -> list[bytes]:
    return rollout_scenes()


def test_a_healthy_candidate_is_promoted_and_rolled_back_by_hand_under_load(versioned, demo_onnx, scenes,
                                                                            monkeypatch) -> None:
    repository, serve = versioned
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))  # beside the live v1
    mirrored: list[tuple[tuple[str, ...], str | None]] = []  # each mirror's models, and the canary routed meanwhile

    def spy(url: str, models: tuple[str, ...], images: tuple[bytes, ...], timeout_s: float = 30.0) -> object:
        mirrored.append((tuple(models), read_route(repository / ROUTE_NAME).canary))
        return mirror(url, models, images, timeout_s)

    monkeypatch.setattr(workflow, "mirror", spy)
    with SteadyLoad(serve.grpc_url, repository / ROUTE_NAME, scenes) as load:
        time.sleep(1.0)
        started = time.monotonic()
        record = rollout(settings(repository, serve))
        promoted_s = time.monotonic() - started
        assert record["action"] == "promote", json.dumps(record["checks"], indent=1)
        assert not {"yolo_v1_preprocess", "yolo_v1_detector", "yolo_v1_nms"} & control(serve).loaded()
        time.sleep(1.0)
        started = time.monotonic()
        manual = rollback(repository, control(serve))
        rolled_back_s = time.monotonic() - started
        time.sleep(1.0)
    print(f"\npromotion {promoted_s:.1f} s ({record['timings']}), manual rollback {rolled_back_s:.1f} s, "
          f"{load.answered} requests answered {load.counts}, canary share {record['observed_canary_share']} %")
    assert record["action"] == "promote", json.dumps(record["checks"], indent=1)
    # The control images went through the candidate alone before its share of users did (its cold calls are in
    # neither side), then through both sides in timed pairs through the window: the latency evidence.
    assert mirrored == [(("yolo_v2",), None)], mirrored
    assert record["timings"]["warmup_s"] > 0  # type: ignore[index]
    assert record["latency_pairs"] >= 10 and record["control_agreement"] == 1.0  # type: ignore[operator]
    assert record["failed"] == [] and record["insufficient"] == []
    assert load.errors == [], load.errors[:5]
    assert load.counts.get("yolo_v2", 0) > 0 and load.counts["yolo"] > load.counts["yolo_v2"]
    assert manual["rolled_back"] == 2 and manual["stable"] == 1
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "rolled_back"
    assert "yolo_v2" not in control(serve).loaded()
    kept = json.loads((repository / str(index.versions[2].decision)).read_text())
    assert kept["action"] == "manual_rollback"


def test_a_candidate_that_finds_nothing_is_rolled_back_by_the_rollout(versioned, demo_onnx, scenes, tmp_path) -> None:
    repository, serve = versioned
    # The demo scores its shapes at 0.95-0.999: a 0.9999 threshold leaves every image empty.
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000, conf_threshold=0.9999))
    record_file = tmp_path / "decision.json"
    command = [sys.executable, "-m", "generator", "rollout", "--model-repository", str(repository),
               "--url", serve.http_url, "--metrics-url", f"127.0.0.1:{serve.metrics_port}", "--canary-percent", "25",
               "--window-s", str(WINDOW_S), "--record", str(record_file)]
    with SteadyLoad(serve.grpc_url, repository / ROUTE_NAME, scenes) as load:
        time.sleep(1.0)
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "TRITON_ADMIN_TOKEN": KEY}, capture_output=True,
                              text=True, timeout=300)
        elapsed = time.monotonic() - started
        time.sleep(1.0)
    assert done.returncode == 3, done.stdout + done.stderr  # the command's exit code for "rolled back"
    record = json.loads(record_file.read_text())
    print(f"\nautomatic rollback {elapsed:.1f} s ({record['timings']}), failed checks {record['failed']}, "
          f"{load.answered} requests answered {load.counts}")
    assert record["action"] == "rollback" and "Rollout of version 2: rollback (failed: " in done.stdout
    # The control images' agreement is judged at once; the users' traffic checks once each side had 20 requests: on
    # a loaded machine the first look may come before, and then they are short of evidence, never passed.
    assert "control_agreement" in record["failed"]
    assert {"empty_share", "detections_distribution"} <= set(record["failed"]) | set(record["insufficient"])
    assert load.errors == [], load.errors[:5]
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "rolled_back"
    assert "yolo_v2" not in control(serve).loaded() and "yolo" in control(serve).loaded()
    assert (repository / "yolo_v2" / Path(str(index.versions[2].decision)).name).is_file()


def test_a_candidate_with_no_users_traffic_ends_undecided_and_stays_a_candidate(versioned, demo_onnx,
                                                                                tmp_path) -> None:
    """A quiet site: no user sends a request in the window, so the canary has no traffic to judge. The rollout
    observes on to --max-window-s, then ends undecided with its own exit code, not a rollback: the stable version
    serves, the candidate is unloaded and still a candidate, and the record names the evidence that was short."""
    repository, serve = versioned
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    record_file = tmp_path / "decision.json"
    command = [sys.executable, "-m", "generator", "rollout", "--model-repository", str(repository),
               "--url", serve.http_url, "--metrics-url", f"127.0.0.1:{serve.metrics_port}", "--window-s", "3",
               "--max-window-s", "6", "--record", str(record_file)]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "TRITON_ADMIN_TOKEN": KEY}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 4, done.stdout + done.stderr  # undecided, distinct from 3 (rolled back)
    record = json.loads(record_file.read_text())
    assert record["action"] == "undecided" and record["failed"] == []
    assert "canary_requests" in record["insufficient"] and record["canary"]["requests"] == 0
    # It observed on to its limit (the last look ends within a second of it; how many looks fit depends on the load).
    assert record["window"]["max_s"] == 6 and record["window"]["seconds"] >= 5
    assert "not enough evidence: " in done.stderr + done.stdout
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "candidate"
    assert (repository / "yolo_v2" / Path(str(index.versions[2].decision)).name).is_file()
    assert "yolo_v2" not in control(serve).loaded() and "yolo" in control(serve).loaded()
    assert json.loads((repository / ROUTE_NAME).read_text())["canary"] is None


def test_a_candidate_triton_refuses_to_load_is_rolled_back_before_any_traffic(versioned, demo_onnx) -> None:
    repository, serve = versioned
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    (repository / "yolo_v2_nms" / "2" / "model.py").write_text("raise RuntimeError('broken on purpose')\n")
    record = rollout(settings(repository, serve))
    assert record["action"] == "rollback" and record["failed"] == ["load"]
    assert "yolo_v2" in str(record["error"])
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "rolled_back"
    assert json.loads((repository / "routing.json").read_text())["canary"] is None


def test_a_rollout_killed_in_its_window_is_ended_safe_by_the_next_one(versioned, demo_onnx) -> None:
    """The rollout's process SIGKILLed while the canary is routed to and loaded: the next rollout finds its phase
    in rollout.json, routes everything to the alias, unloads the candidate and records the interruption."""
    repository, serve = versioned
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    command = [sys.executable, "-m", "generator", "rollout", "--model-repository", str(repository),
               "--url", serve.http_url, "--metrics-url", f"127.0.0.1:{serve.metrics_port}", "--window-s", "120"]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "TRITON_ADMIN_TOKEN": KEY},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while json.loads((repository / ROUTE_NAME).read_text()).get("canary") is None:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    process.kill()
    process.wait()
    assert json.loads((repository / "rollout.json").read_text())["phase"] == "observing"
    assert "yolo_v2" in control(serve).loaded()
    record = rollout(settings(repository, serve))
    assert (record["action"], record["failed"], record["phase"], record["candidate"]) == (
        "rollback", ["interrupted"], "observing", 2)
    assert json.loads((repository / ROUTE_NAME).read_text())["canary"] is None
    assert not (repository / "rollout.json").exists()
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "rolled_back"
    assert "yolo_v2" not in control(serve).loaded() and "yolo" in control(serve).loaded()


def test_the_watch_after_a_promotion_moves_the_alias_back_when_the_answers_degrade(versioned, demo_onnx,
                                                                                  scenes) -> None:
    """A candidate that passes its canary window is promoted; while it is watched the traffic turns into images
    it finds nothing in (what a model that stopped seeing looks like from outside): the watch compares with the
    window the old version had, sees the empty share jump and moves the alias back by itself, without a failed
    request."""
    repository, serve = versioned
    add_version(demo_onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    blank = encode(np.full((480, 640, 3), 114, np.uint8), ".jpg")
    watched = dataclasses.replace(settings(repository, serve), watch_s=WINDOW_S)
    with SteadyLoad(serve.grpc_url, repository / ROUTE_NAME, scenes) as load:
        time.sleep(1.0)
        done: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: done.update(rollout(watched)))
        thread.start()
        while thread.is_alive() and _phase(repository) != "watching":
            time.sleep(0.1)
        load.images[:] = [blank]
        thread.join(timeout=300)
    watch = done["watch"]
    print(f"\nwatch: {watch['action']} (failed {watch['failed']}), {load.answered} requests answered {load.counts}")
    assert done["action"] == "rollback_after_promotion" and watch["action"] == "rollback"
    assert "empty_share" in watch["failed"]
    assert load.errors == [], load.errors[:5]
    index = read_index(repository)
    assert index is not None and index.stable == 1 and index.versions[2].state == "rolled_back"
    assert "yolo_v2" not in control(serve).loaded() and {"yolo", "yolo_v1"} <= control(serve).loaded()


def _phase(repository: Path) -> str | None:
    try:
        return str(json.loads((repository / "rollout.json").read_text())["phase"])
    except (OSError, ValueError, KeyError):
        return None
