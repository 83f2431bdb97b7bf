"""The Locust users and the stream client against the real embedded Triton serving each task fixture: every answer
of a segment, pose, obb or classify ensemble is checked and counted, none fails.

Loads are tiny and bounded (one user, a few seconds; a stream of a few frames), loopback only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import TASK_FIXTURES
from tests.integration.rtsp import write_scene_video

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _name(key: str) -> str:
    return key.replace("-", "_")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("task-load")
    repositories = []
    for key in TASK_FIXTURES:
        repositories.append(root / f"repo-{key}")
        build_repository(fixtures.write(key, root / "onnx"), repositories[-1],
                         BuildOptions(name=_name(key), service_ms=50.0))
    first, *rest = repositories
    with EmbeddedServer(first, free_port(), free_port(), free_port(), log_file=root / "tritonserver.log",
                        extra_args=tuple(f"--model-repository={r}" for r in rest)) as running:
        yield running


def _python(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          check=False)


@pytest.mark.parametrize(("key", "protocol", "workers"), [(key, "grpc", 0) for key in TASK_FIXTURES] + [
    ("seg-static", "http", 0), ("classify-static", "http", 0), ("pose-static", "grpc", 1)])
def test_locust_users_check_and_count_each_tasks_answers(server: EmbeddedServer, key: str, protocol: str,
                                                          workers: int, tmp_path: Path) -> None:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    # with a worker, its counts reach the master's summary through Locust's worker reports
    distributed = ("--local-workers", str(workers), "--master-port", str(free_port())) if workers else ()
    result = _python("-m", "loadtest", "run", "--url", url, "--protocol", protocol, "--model", _name(key),
                     "--metrics-url", server.metrics_url, "--users", "1", "--spawn-rate", "1", "--duration", "4s",
                     "--sizes", "640x480", "--images-per-size", "2", "--out", str(tmp_path), "--max-fail-ratio", "0",
                     *distributed)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    client, task = summary["client"], TASK_FIXTURES[key]
    assert client["requests"] > 0 and client["failures"] == 0
    counts = summary["outputs"][task]
    assert counts["answers"] == client["requests"]
    assert f"{task} answers checked: {counts['answers']}" in result.stdout
    if task == "classify":
        assert counts["top_classes"] == 5 * counts["answers"] and counts["detections"] == 0
        return
    assert counts["detections"] > 0
    extra = {"pose": ("keypoints", 17), "obb": ("rotated_boxes", 1), "segment": ("masks", 1)}[task]
    assert counts[extra[0]] == extra[1] * counts["detections"]


@pytest.mark.parametrize("key", list(TASK_FIXTURES))
def test_a_short_stream_answers_every_frame_with_the_tasks_fields(server: EmbeddedServer, key: str,
                                                                 tmp_path: Path) -> None:
    video = write_scene_video(tmp_path / "scenes.mp4", 8, seed=11, fps=8)
    summary_path = tmp_path / "summary.json"
    result = _python("-m", "clients.stream", f"cam={video}", "--url", server.grpc_url, "--model", _name(key),
                     "--max-frames", "6", "--summary-json", str(summary_path), "--annotate", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    summary = json.loads(summary_path.read_text())
    (stream,) = summary["streams"]
    assert stream["answered"] == stream["sent"] == len(lines) >= 3 and stream["failed"] == 0
    task, carried = TASK_FIXTURES[key], stream["outputs"]
    if task == "classify":
        assert all(len(line["top"]) == 5 and not line["detections"] for line in lines)
        assert carried["top_classes"] == 5 * len(lines) and carried["detections"] == 0
    else:
        field = {"pose": "keypoints", "obb": "rotated_box", "segment": "mask"}[task]
        found = [d for line in lines for d in line["detections"]]
        assert found and all(field in d for d in found)
        assert carried["detections"] == len(found)
        count = {"pose": ("keypoints", 17), "obb": ("rotated_boxes", 1), "segment": ("masks", 1)}[task]
        assert carried[count[0]] == count[1] * len(found)
    assert (tmp_path / "out" / "cam.mp4").stat().st_size > 0
