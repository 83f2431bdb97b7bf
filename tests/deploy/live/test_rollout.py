"""Versions and rollouts in the running stack, under a steady load through the proxy.

Each update is the user's command, ``python -m deploy update --local``: the builder adds the next version to the
versioned repository in the volume (no network), then the one-shot ``rollout-cpu`` container, in the pod's network
namespace with the admin token from its secret file, tries it on a share of the traffic the proxy splits (HTTPS) and
promotes and watches it, or rolls it back, by itself. Two client threads send scenes over HTTPS through the proxy
the whole time, without retries: a request a rollout drops shows as an error. Then Triton is killed in the middle of
a window: the rollout ends safe (the stable version serving, the decision recorded).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients import NO_RETRY
from tests.deploy.live.conftest import REPO, LiveStack, probe_image
from tests.helpers import LoadTally, TalliedLoad

pytestmark = [pytest.mark.live]

# A short window keeps the lane's time (the defaults are 60 s and --watch-s = --window-s); every limit is the default.
ROLLOUT_FLAGS = "--window-s 15 --watch-s 10 --canary-percent 30"


class SteadyLoad(TalliedLoad):
    """Two threads sending scenes back to back over HTTPS through the proxy (which splits them), no retries."""

    def __init__(self, stack: LiveStack, images: list[bytes]) -> None:
        self.stack, self.images = stack, images
        self.tally = LoadTally()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        with self.stack.client("https", retry=NO_RETRY) as client:
            self.tally.send_until(self._stop, client.detect, self.images)

    def __enter__(self) -> SteadyLoad:
        for thread in self._threads:
            thread.start()
        time.sleep(2.0)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def deploy(stack: LiveStack, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deploy", *args, "--local", "--project", stack.project], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str], timeout_s: float = 900) -> tuple[int, dict[str, Any], str]:
    out, err = process.communicate(timeout=timeout_s)
    if process.returncode not in (0, 3):
        raise AssertionError(f"deploy exited {process.returncode}: {err[-3000:]}")
    return process.returncode, json.loads(out), err


def update(stack: LiveStack, build_flags: str, *extra: str) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    process = deploy(stack, "update", "--build-flags", build_flags, "--rollout-flags", ROLLOUT_FLAGS, *extra)
    code, record, _ = finished(process)
    return code, record, time.monotonic() - started


def route(stack: LiveStack) -> dict[str, Any]:
    return dict(stack.read_json("/models/routing/routing.json"))


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The user's control images with COCO labels, readable by the rollout's uid."""
    from generator.synthetic import write_dataset

    folder = tmp_path_factory.mktemp("control")
    labels = write_dataset(folder, count=6, seed=77, sizes=((640, 480), (1280, 720)))
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder, labels


@pytest.fixture(scope="module")
def load_images(scenes: list[bytes]) -> list[bytes]:
    return [*scenes, probe_image()]


@pytest.fixture()
def load(stack: LiveStack, load_images: list[bytes]) -> Iterator[SteadyLoad]:
    with SteadyLoad(stack, load_images) as running:
        yield running


def test_a_good_candidate_is_promoted_and_watched_without_a_failed_request(stack: LiveStack, load: SteadyLoad,
                                                                           labelled: tuple[Path, Path]) -> None:
    folder, labels = labelled
    code, record, took = update(stack, "--max-detections 200", "--control-images", str(folder),
                                "--control-labels", str(labels))
    print(f"\ngood candidate: {record['action']} in {took:.0f} s ({record['deploy_update']}, rollout "
          f"{record['timings']}), canary share {record['observed_canary_share']} %, {load.answered} requests, "
          f"{len(load.errors)} failed; labelled mAP@0.5 {record['control_labels_map50']}")
    assert (code, record["action"]) == (0, "promote"), json.dumps(record.get("checks"), indent=1)
    assert record["watch"]["action"] == "keep", json.dumps(record["watch"].get("checks"), indent=1)
    assert load.errors == [], load.errors[:5]
    assert record["control"]["source"] == "user" and record["control"]["labelled"] is True
    assert record["control"]["images"] == 6 and set(record["control_labels_map50"]) == {"stable", "canary"}
    assert record["canary"]["requests"] >= 20 and record["stable"]["requests"] > record["canary"]["requests"]
    index = stack.index()
    assert (index["stable"], index["previous_stable"], index["versions"]["1"]["state"]) == (2, 1, "retired")
    assert route(stack)["canary"] is None
    assert stack.exec("triton-cpu", "test", "-e", "/models/current/rollout.json").returncode == 1  # finished


def test_a_manual_rollback_brings_the_previous_version_back_without_a_failed_request(stack: LiveStack,
                                                                                     load: SteadyLoad) -> None:
    started = time.monotonic()
    code, record, _ = finished(deploy(stack, "rollback"))
    took = time.monotonic() - started
    print(f"\nmanual rollback: {took:.1f} s (in the container {record['total_s']} s), {load.answered} requests, "
          f"{len(load.errors)} failed")
    assert code == 3 and (record["action"], record["rolled_back"], record["stable"]) == ("manual_rollback", 2, 1)
    assert load.errors == [], load.errors[:5]
    index = stack.index()
    assert index["stable"] == 1 and index["versions"]["2"]["state"] == "rolled_back"


def test_a_degraded_candidate_is_rolled_back_by_itself_without_a_failed_request(stack: LiveStack,
                                                                                load: SteadyLoad) -> None:
    code, record, took = update(stack, "--conf-threshold 0.9999")
    print(f"\ndegraded candidate: {record['action']} in {took:.0f} s ({record['deploy_update']}, rollout "
          f"{record['timings']}), failed checks {record['failed']}, {load.answered} requests, "
          f"{len(load.errors)} failed")
    assert (code, record["action"]) == (3, "rollback")
    # Agreement is judged at once; the empty share once each side had 20 users' requests (else it is short of
    # evidence, never passed).
    assert "control_agreement" in record["failed"]
    assert "empty_share" in set(record["failed"]) | set(record["insufficient"])
    assert record["control"]["source"] == "synthetic"  # no --control-images: the demo's scenes, said so
    assert load.errors == [], load.errors[:5]
    index = stack.index()
    assert index["stable"] == 1 and index["versions"]["3"]["state"] == "rolled_back"
    assert route(stack)["canary"] is None


def test_triton_killed_in_the_middle_of_a_window_ends_safe(stack: LiveStack) -> None:
    """tritonserver killed while the canary is routed to: the rollout notices at once, waits for the restarted
    container, and ends safe: version 1 serving, the candidate rolled back with the interruption recorded."""
    process = deploy(stack, "update", "--build-flags", "--max-detections 150", "--rollout-flags",
                     "--window-s 120 --canary-percent 30")
    deadline = time.monotonic() + 900
    while route(stack).get("canary") is None:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.5)
    killed = time.monotonic()
    for pid in stack.host_pids("triton-cpu", "tritonserver"):
        subprocess.run(["kill", "-9", str(pid)], check=False)
    code, record, _ = finished(process)
    ended = time.monotonic() - killed
    healed = stack.wait_serving(120)
    print(f"\nTriton killed mid-window: the rollout ended safe {ended:.1f} s later ({record['failed']}, phase "
          f"{record.get('phase')}); serving through the proxy {healed:.1f} s after that")
    assert (code, record["action"], record["failed"], record["phase"]) == (3, "rollback", ["interrupted"], "observing")
    index = stack.index()
    assert index["stable"] == 1 and index["versions"]["4"]["state"] == "rolled_back"
    assert route(stack)["canary"] is None
    assert stack.exec("triton-cpu", "test", "-e", "/models/current/rollout.json").returncode == 1


def test_a_rollout_container_killed_mid_window_is_ended_safe_by_the_next_run(stack: LiveStack) -> None:
    """The rollout's container SIGKILLed while the canary is routed to: its phase stays in the volume, and the
    next run of the service ends that rollout first (route on the alias, candidate unloaded and rolled back)."""
    from deploy.local.update import Update, builder_args
    from deploy.settings import Settings

    stack.compose("run", "--rm", "--no-deps", "builder-cpu", *builder_args(Settings(), Update(
        build_flags=("--max-detections", "120"))), timeout_s=900)
    name = f"{stack.project}-rollout-killed"
    stack.compose("run", "-d", "--name", name, "rollout-cpu", "--window-s", "120", "--canary-percent", "30")
    try:
        deadline = time.monotonic() + 300
        while route(stack).get("canary") is None:
            assert time.monotonic() < deadline, docker_logs(name)
            time.sleep(0.5)
        subprocess.run(["docker", "kill", name], check=True, capture_output=True)
    finally:
        subprocess.run(["docker", "rm", "-f", name], check=False, capture_output=True)
    assert stack.read_json("/models/current/rollout.json")["phase"] == "observing"
    assert route(stack)["canary"] == "yolo_v5"
    started = time.monotonic()
    again = stack.compose("run", "--rm", "-T", "rollout-cpu", check=False, timeout_s=600)
    took = time.monotonic() - started
    record = json.loads(again.stdout[again.stdout.index("{"):])
    print(f"\nrollout container killed mid-window: the next run ended it safe in {took:.1f} s ({record['failed']}, "
          f"phase {record['phase']})")
    assert again.returncode == 3, again.stderr[-2000:]
    assert (record["action"], record["failed"], record["phase"], record["candidate"]) == (
        "rollback", ["interrupted"], "observing", 5)
    index = stack.index()
    assert index["stable"] == 1 and index["versions"]["5"]["state"] == "rolled_back"
    assert route(stack)["canary"] is None and stack.serving()


def docker_logs(name: str) -> str:
    result = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    return (result.stdout + result.stderr)[-3000:]
