"""The live-stack lane: the compose stack in real containers, started once with ``python -m deploy up --local``.

Every test here talks to the stack only through the ports it publishes on 127.0.0.1 and through the docker CLI
(``docker compose``, ``docker exec``, ``docker top`` for host PIDs). The modules run in the order of ``ORDER``: what
only reads first, the load tests, then the faults, which break and heal the stack. ``down --local`` removes it
at the end. Without a Docker Engine >= 25 the lane is skipped with the reason, unless ``TDE_REQUIRE_DOCKER=1``
(set by .ci/run, which installs and starts one), where that is a failure.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients import ClientError, DetectionClient
from deploy.composefile import parse_env
from deploy.local import stack as local_stack
from deploy.local.docker_versions import EngineError, check_engine

REPO = Path(__file__).resolve().parents[3]
ORDER = ("test_images", "test_serving", "test_monitoring", "test_loadtest", "test_rollout", "test_front_door", "test_faults", "test_site")
PROJECT = f"tde-live-{os.getpid()}"
UP_TIMEOUT_S = 2400


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Reorder this package's tests by ORDER, in the slots they already hold (other tests keep theirs)."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if Path(str(item.fspath)).parent == here]
    ranked = sorted((items[i] for i in slots), key=lambda item: ORDER.index(Path(str(item.fspath)).stem))
    for slot, item in zip(slots, ranked, strict=True):
        items[slot] = item


@dataclass
class LiveStack:
    """The running stack: its endpoints (the JSON line of `deploy up`) and the docker CLI aimed at it."""

    project: str
    endpoints: dict[str, str]
    up_s: float

    @property
    def ca_cert(self) -> Path:
        return Path(self.endpoints["ca_cert"])

    @property
    def admin_token(self) -> str:
        return Path(self.endpoints["admin_token_file"]).read_text().strip()

    @property
    def state(self) -> Path:
        return local_stack.STATE_ROOT / self.project

    def env(self) -> dict[str, str]:
        return parse_env((self.state / local_stack.ENV_FILE).read_text())

    def compose(self, *args: str, timeout_s: float = 600, check: bool = True,
                files: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
        """``docker compose`` on the stack's project (extra ``files`` are compose overrides)."""
        command = ["docker", *local_stack.compose_args(self.project)]
        if files:
            at = command.index("-p")
            command[at:at] = [arg for f in files for arg in ("-f", str(f))]
        result = subprocess.run([*command, *args], env={**os.environ, **self.env()}, capture_output=True, text=True,
                                timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed: {result.stderr[-2000:]}")
        return result

    def container(self, service: str) -> str:
        ids = self.compose("ps", "--all", "-q", service).stdout.split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def inspect(self, service: str, template: str) -> str:
        return docker("inspect", "--format", template, self.container(service)).stdout.strip()

    def exec(self, service: str, *command: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        as_user = ["-u", user] if user else []
        return docker("exec", *as_user, self.container(service), *command, check=False)

    def client(self, scheme: str, **options: Any) -> DetectionClient:
        url = self.endpoints["https" if scheme == "https" else "grpcs"]
        return DetectionClient(url, ca_cert=self.ca_cert, timeout_s=10, **options)

    def serving(self) -> bool:
        """One detection through the proxy answers."""
        try:
            with self.client("grpcs") as client:
                client.detect(probe_image())
        except ClientError:
            return False
        return True

    def wait_serving(self, timeout_s: float, since: float | None = None) -> float:
        """Seconds from ``since`` (default: now) until a detection through the proxy answers; fails after timeout."""
        start = time.monotonic() if since is None else since
        while time.monotonic() - start < timeout_s:
            if self.serving():
                return time.monotonic() - start
            time.sleep(0.25)
        raise AssertionError(f"the stack did not serve again within {timeout_s:.0f} s: {self.status()}")

    def status(self) -> str:
        return self.compose("ps", "--all", "--format", "{{.Service}} {{.Status}}").stdout.replace("\n", "; ")

    def read_json(self, path: str) -> Any:
        """A JSON file of the models volume, read inside the Triton container."""
        return json.loads(self.exec("triton-cpu", "cat", path).stdout)

    def index(self) -> dict[str, Any]:
        """The versioned repository's index (versions.json) the stack serves."""
        return dict(self.read_json("/models/current/versions.json"))

    def stable_manifest(self) -> dict[str, Any]:
        """The manifest of the version the alias serves."""
        index = self.index()
        return dict(self.read_json(f"/models/current/{index['name']}_v{index['stable']}/manifest.json"))

    def host_pids(self, service: str, needle: str) -> list[int]:
        """Host PIDs of the service's processes whose command line contains ``needle`` (``docker top``)."""
        table = docker("top", self.container(service), "-eo", "pid,args").stdout.splitlines()[1:]
        return [int(line.split(None, 1)[0]) for line in table if needle in line]


def docker(*args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} failed: {result.stderr[-1000:]}")
    return result


@functools.cache
def probe_image() -> bytes:
    """One 640x480 synthetic scene."""
    import numpy as np

    from generator.synthetic import encode, make_scene

    return encode(make_scene(np.random.default_rng(29), 640, 480).image)


def _no_engine() -> str | None:
    try:
        check_engine()
    except EngineError as exc:
        return str(exc)
    return None


_FAILED: list[str] = []  # pytest sets a package fixture up again for every test after a failure: once is enough


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    if _FAILED:
        pytest.fail(f"the stack did not come up (see the first error): {_FAILED[0]}")
    reason = _no_engine()
    if reason is not None:
        if os.environ.get("TDE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the live-stack lane needs Docker: {reason}")
        pytest.skip(f"no Docker Engine for the live-stack lane: {reason}")
    log = tmp_path_factory.mktemp("live") / "deploy-up.log"
    command = [sys.executable, "-m", "deploy", "up", "--local", "--project", PROJECT, "--publish", "auto"]
    started = time.monotonic()
    try:
        with log.open("w") as err:
            result = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True,
                                    timeout=UP_TIMEOUT_S, check=False)
        elapsed = time.monotonic() - started
        if result.returncode != 0:
            _FAILED.append(f"python -m deploy up --local failed (exit {result.returncode})")
            pytest.fail(f"python -m deploy up --local failed (exit {result.returncode}): {log.read_text()[-3000:]}")
        endpoints = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"\ndeploy up --local: healthy after {elapsed:.0f} s (images built or reused): {endpoints}")
        yield LiveStack(PROJECT, endpoints, elapsed)
    finally:
        subprocess.run([sys.executable, "-m", "deploy", "down", "--local", "--project", PROJECT], cwd=REPO,
                       capture_output=True, timeout=900, check=False)


@pytest.fixture(scope="package")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """Four synthetic scenes with objects (the demo detector's classes), two sizes."""
    from generator.synthetic import write_dataset

    folder = tmp_path_factory.mktemp("scenes")
    write_dataset(folder, count=4, seed=2024, sizes=((1280, 720), (640, 480)))
    return [path.read_bytes() for path in sorted(folder.glob("*.jpg"))]
