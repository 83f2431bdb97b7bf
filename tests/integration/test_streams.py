"""Video streams through the real embedded Triton, from a real RTSP server (GStreamer's gst-rtsp-server, started
here under Debian's Python) serving H.264 videos of synthetic scenes the demo detector knows.

What a camera deployment needs: concurrent streams without errors and with every dropped frame counted, a camera
that vanishes and comes back, broken and unreachable sources reported by name while the others keep running, and
the same detections as the still-image client for the same frames.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from clients import DetectionClient
from clients.stream import Answer, StreamSettings, encode_jpeg, parse_source, parse_sources, run_streams
from generator.server.ports import free_port
from tests.integration.rtsp import FPS, RtspServer, write_scene_video

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CAMERAS = 4
FRAMES = 45  # 9 s at 5 frames/s: longer than every session below, so each plays one stretch of its file


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("videos")
    return [write_scene_video(folder / f"cam{i}.mp4", FRAMES, seed=100 + i) for i in range(CAMERAS)]


@pytest.fixture
def rtsp(videos: list[Path], tmp_path: Path):
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(7).bytes(64_000))  # not a video: the server cannot play it
    mounts = {f"cam{i}": path for i, path in enumerate(videos)} | {"broken": garbage}
    server = RtspServer(mounts, tmp_path / "rtsp.log").start()
    yield server
    server.stop()


def _settings(triton_server, **changes) -> StreamSettings:
    return StreamSettings(**{"url": triton_server.grpc_url, "model": triton_server.model_name,
                             "admin_key": triton_server.admin_key, **changes})


def test_four_cameras_at_five_fps_answer_every_stream_without_errors(triton_server, rtsp, tmp_path):
    """The command as a user runs it: four RTSP cameras for 8 s, one JSON line per answered frame, a summary."""
    summary_path = tmp_path / "summary.json"
    sources = [f"cam{i}={rtsp.url(f'cam{i}')}" for i in range(CAMERAS)]
    run = subprocess.run(
        [sys.executable, "-m", "clients.stream", *sources, "--url", triton_server.grpc_url, "--duration", "8",
         "--admin-token", triton_server.admin_key, "--summary-json", str(summary_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    summaries = {s["stream"]: s for s in json.loads(summary_path.read_text())["streams"]}
    assert set(summaries) == {f"cam{i}" for i in range(CAMERAS)}
    for name, s in summaries.items():
        frames = [line["frame"] for line in lines if line["stream"] == name]
        assert frames == sorted(frames) and len(set(frames)) == len(frames), f"{name}: frames out of order"
        assert len(frames) == s["answered"]
        # ~7 s of frames after the RTSP session is set up. How many the server answers depends on what else the
        # machine runs (under a load average of 10 about a third); the others are dropped and counted, not queued.
        assert s["read"] >= 5 * FPS and s["answered"] >= FPS, s
        assert s["failed"] == 0 and s["source_errors"] == 0 and s["decode_errors"] == 0, s
        assert s["read"] == s["sent"] + s["dropped"] + s["left"] and s["left"] <= 1, s
        assert s["sent"] == s["answered"], s
        assert s["p95_ms"] is not None and s["p95_ms"] > 0
    assert all({"stream", "frame", "timestamp", "latency_ms", "detections"} <= set(line) for line in lines)
    assert sum(len(line["detections"]) for line in lines) > len(lines), "the scenes hold several shapes each"
    assert {d["class_name"] for line in lines for d in line["detections"]} <= {
        "circle", "square", "triangle", "cross", "star", "ring"}
    for name in summaries:
        assert name in run.stderr, "the summary table names every stream"


def _run_in_thread(coroutine_factory):
    """Run an asyncio stream run in a thread, so the test can act on the RTSP server meanwhile."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coroutine_factory())
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def test_a_camera_that_disappears_is_reopened_with_backoff(triton_server, rtsp):
    answers: list[Answer] = []
    spec = parse_source(f"cam0={rtsp.url('cam0')}")
    thread, box = _run_in_thread(
        lambda: run_streams([spec], _settings(triton_server, duration_s=30.0), [answers.append]))
    deadline = time.monotonic() + 20
    while len(answers) < 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(answers) >= 10, "the camera never delivered"
    before = len(answers)
    rtsp.restart(after_s=3.0)  # gone for 3 s, back on the same port
    deadline = time.monotonic() + 25  # the default back-off: 0.5, 1, 2, 4 s ... so back within about 8 s
    while len(answers) < before + 10 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(answers) >= before + 10, f"no frames after the camera came back ({len(answers) - before})"
    thread.join(timeout=40)
    assert "error" not in box, box.get("error")
    (summary,) = box["result"]
    assert summary["reconnects"] >= 1 and summary["source_errors"] >= 1, summary
    assert summary["failed"] == 0, summary
    indices = [a.frame.index for a in answers]
    assert indices == sorted(indices) and len(set(indices)) == len(indices), "frame indices go on across reopenings"


def test_broken_and_unreachable_sources_are_reported_by_name_while_the_others_run(triton_server, rtsp, videos,
                                                                                 tmp_path, caplog):
    corrupt_file = tmp_path / "corrupt.mp4"
    corrupt_file.write_bytes(b"\x00\x00\x00\x18ftypmp42" + np.random.default_rng(3).bytes(20_000))
    specs = parse_sources([f"good={rtsp.url('cam1')}", f"broken={rtsp.url('broken')}",
                           f"nobody=rtsp://127.0.0.1:{free_port()}/cam", f"corrupt={corrupt_file}"])
    answers: list[Answer] = []
    with caplog.at_level(logging.ERROR, logger="clients.stream"):
        summaries = asyncio.run(run_streams(specs, _settings(triton_server, duration_s=8.0), [answers.append]))
    by_name = {s["stream"]: s for s in summaries}
    good = by_name["good"]
    assert good["read"] >= 5 * FPS and good["answered"] >= FPS, good
    assert good["failed"] == 0 and good["source_errors"] == 0, good
    assert {a.stream for a in answers} == {"good"}
    assert by_name["broken"]["answered"] == 0 and "5XX" in (by_name["broken"]["last_error"] or ""), by_name["broken"]
    assert by_name["broken"]["reconnects"] >= 2, "a refusing camera is retried"
    assert "Connection refused" in (by_name["nobody"]["last_error"] or ""), by_name["nobody"]
    assert by_name["corrupt"]["status"] == "failed" and "Invalid data" in by_name["corrupt"]["last_error"]
    assert by_name["corrupt"]["reconnects"] == 0, "a file that is not a video is not retried"
    for name in ("broken", "nobody", "corrupt"):
        assert any(f"stream {name}:" in r.getMessage() for r in caplog.records), f"no error logged for {name}"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_stream_detections_equal_the_still_image_clients_for_the_same_frames(triton_server, rtsp, videos, protocol):
    """The same JPEG bytes both ways: the stream's frame k, and frame k of the file decoded and encoded here."""
    import av

    answers: list[Answer] = []
    spec = parse_source(f"cam2={rtsp.url('cam2')}")
    url = triton_server.grpc_url if protocol == "grpc" else f"http://{triton_server.http_url}"
    asyncio.run(run_streams([spec], _settings(triton_server, duration_s=6.0, url=url), [answers.append]))
    assert len(answers) >= 6
    with av.open(str(videos[2])) as container:
        local = [frame.to_ndarray(format="bgr24") for frame in container.decode(video=0)]
    sampled = answers[::3]
    with DetectionClient(triton_server.grpc_url, model=triton_server.model_name,
                         admin_key=triton_server.admin_key) as client:
        for answer in sampled:
            jpeg = encode_jpeg(local[answer.frame.index])
            assert jpeg == answer.jpeg, f"frame {answer.frame.index}: the stream decoded other pixels"
            still = client.detect(jpeg)
            assert len(still) == len(answer.result) > 0, f"frame {answer.frame.index}"
            np.testing.assert_allclose(still.boxes, answer.result.boxes, atol=1e-3)
            np.testing.assert_allclose(still.scores, answer.result.scores, atol=1e-4)
            np.testing.assert_array_equal(still.class_ids, answer.result.class_ids)


@pytest.fixture(scope="module")
def camera_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A private CA (as a site's cameras have) and the camera's certificate it signed for 127.0.0.1."""
    from deploy.local.credentials import make_ca, make_server_certificate

    root = tmp_path_factory.mktemp("camera-pki")
    ca = make_ca(root / "ca")
    make_server_certificate(ca, root / "camera", ("127.0.0.1",), os.getuid())
    return {"ca": ca[0], "cert": root / "camera" / "tls.crt", "key": root / "camera" / "tls.key"}


@pytest.fixture
def rtsps(videos: list[Path], camera_pki: dict[str, Path], tmp_path: Path):
    server = RtspServer({"cam0": videos[0]}, tmp_path / "rtsps.log", tls=(camera_pki["cert"], camera_pki["key"]))
    yield server.start()
    server.stop()


def _stream_command(triton_server, tmp_path: Path, source: str, *flags: str) -> tuple[int, dict, str]:
    summary_path = tmp_path / "summary.json"
    run = subprocess.run(
        [sys.executable, "-m", "clients.stream", source, "--url", triton_server.grpc_url, "--duration", "5",
         "--admin-token", triton_server.admin_key, "--summary-json", str(summary_path), "--quiet", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=90,
    )
    (summary,) = json.loads(summary_path.read_text())["streams"]
    return run.returncode, summary, run.stderr


def test_an_rtsps_camera_is_served_when_its_certificate_is_trusted_and_refused_by_name_when_not(
        triton_server, rtsps, camera_pki, tmp_path):
    """A camera speaking RTSP over TLS only, its certificate from the site's private CA: trusted through
    --rtsps-ca, frames answered; against the system's CAs, refused by name and not retried; --rtsps-insecure plays
    it anyway, which shows that FFmpeg itself verifies nothing (it accepted the private CA's certificate)."""
    source = f"gate={rtsps.url('cam0')}"
    assert source.split("=", 1)[1].startswith("rtsps://")
    code, trusted, _ = _stream_command(triton_server, tmp_path, source, "--rtsps-ca", str(camera_pki["ca"]))
    assert code == 0 and trusted["answered"] >= FPS and trusted["failed"] == 0, trusted
    assert trusted["source_errors"] == 0, trusted
    code, refused, stderr = _stream_command(triton_server, tmp_path, source)
    assert code != 0 and refused["status"] == "failed" and refused["read"] == 0, refused
    assert "the camera's certificate is not trusted (unable to get local issuer certificate" in refused["last_error"]
    assert refused["reconnects"] == 0 and "stream gate:" in stderr
    code, insecure, stderr = _stream_command(triton_server, tmp_path, source, "--rtsps-insecure")
    assert code == 0 and insecure["answered"] >= FPS, insecure
    assert "stream gate: its rtsps:// certificate is not verified (--rtsps-insecure)" in stderr
