"""numpy 2 where the user works, numpy 1.26 where the embedded Triton 2.51's stubs run, made by the user's code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from generator.cache import cache_root
from generator.server.embedded import TRITON_VERSION, EmbeddedServer, ensure_server
from generator.server.environments import DIGEST_FILE, STUB_CPU, Environment, is_verified
from generator.server.ports import free_port

pytestmark = pytest.mark.integration
PROBE = Path(__file__).parent / "stub_probe"


def locked_version(package: str, lock: Path) -> str:
    """The version ``lock`` pins for ``package`` (one pin for every Python, as in stub-cpu.txt)."""
    found = set(re.findall(rf"^{re.escape(package)}==(\S+)", lock.read_text(), flags=re.MULTILINE))
    assert len(found) == 1, f"{lock.name} pins {package} {sorted(found) or 'not at all'}"
    return found.pop()


def test_the_user_environment_runs_numpy_2_and_the_current_clients() -> None:
    assert int(version("numpy").split(".")[0]) >= 2
    assert np.__version__ == version("numpy")
    assert version("tritonclient") == "2.73.0"
    assert version("locust") == ("2.47.0" if sys.version_info >= (3, 11) else "2.46.0")


def test_the_stub_runs_numpy_1_from_the_environment_serve_made(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    shutil.copytree(PROBE, repository / "stub_probe")
    server = EmbeddedServer(repository, free_port(), free_port(), free_port(), log_file=tmp_path / "triton.log")
    with server, httpclient.InferenceServerClient(server.http_url) as client:
        image = np.array([b"a JPEG would be here"], dtype=np.object_)
        request = httpclient.InferInput("IN", [1], "BYTES")
        request.set_data_from_numpy(image)
        out = client.infer("stub_probe", [request]).as_numpy("OUT")
    report = json.loads(out[0])
    assert report["numpy"] == locked_version("numpy", STUB_CPU.lock) == "1.26.4"
    assert report["cv2"] == locked_version("opencv-python-headless", STUB_CPU.lock).rsplit(".", 1)[0]
    assert report["received"] == ["a JPEG would be here"]  # a BYTES input, which numpy 2 breaks in this stub
    stub_root = STUB_CPU.location(cache_root())
    assert Path(report["prefix"]).resolve() == stub_root.resolve()
    assert is_verified(stub_root, STUB_CPU)
    assert np.__version__ != report["numpy"]


def _prepare(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITON_DETECTION_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "generator", "serve", "--prepare"], capture_output=True,
                          text=True, env=env, timeout=600, check=False)


@pytest.mark.slow
def test_serve_prepare_makes_the_stub_environment_from_its_lock_and_remakes_a_changed_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    server = ensure_server()  # the server itself is not what this test is about: share the fetched one
    (cache / server.root.name).symlink_to(server.root)
    result = _prepare(cache)
    assert result.returncode == 0, result.stderr
    root = STUB_CPU.location(cache)
    assert f"Triton {TRITON_VERSION} in" in result.stdout and str(root) in result.stdout
    assert is_verified(root, STUB_CPU)
    numpy_here = subprocess.run([str(Environment(root).python), "-c", "import numpy; print(numpy.__version__)"],
                                capture_output=True, text=True, check=True).stdout.strip()
    assert numpy_here == locked_version("numpy", STUB_CPU.lock)

    (root / DIGEST_FILE).write_text("0" * 64 + "\n")  # an environment that no longer matches its lock
    again = _prepare(cache)
    assert again.returncode == 0, again.stderr
    assert "making it again" in again.stdout
    assert is_verified(root, STUB_CPU)
