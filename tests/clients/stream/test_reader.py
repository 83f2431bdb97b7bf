"""The reader thread on real PyAV decoding: pacing, looping, reopening with back-off, sources that cannot work."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from clients.stream.decode import DecodeOptions, FatalSourceError, open_video
from clients.stream.frame import Frame
from clients.stream.reader import Reader, ReaderSettings
from clients.stream.slot import LatestSlot
from clients.stream.sources import parse_source
from clients.stream.stats import StreamStats
from generator.server.ports import free_port


def write_video(path: Path, frames: int, fps: int = 5) -> Path:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(frames):
            image = np.full((48, 64, 3), i * 10 % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def run_reader(location: str, settings: ReaderSettings, options: DecodeOptions | None = None,
               timeout_s: float = 20.0) -> tuple[list[Frame], StreamStats]:
    spec = parse_source(location)
    slot: LatestSlot[Frame] = LatestSlot(10_000)  # keep every frame: these tests look at what the reader offers
    stats = StreamStats(spec.name)
    reader = Reader(spec, lambda s: open_video(s, options or DecodeOptions()), slot, stats, lambda: None, settings, threading.Event())
    reader.start()
    reader.join(timeout_s)
    assert reader.finished.is_set(), "the reader did not finish"
    return list(slot._items), stats  # every frame offered, oldest first (take() would give only the newest)


def test_a_file_is_played_at_its_frame_rate_and_ends(tmp_path):
    video = write_video(tmp_path / "clip.mp4", 10, fps=5)
    started = time.monotonic()
    frames, stats = run_reader(str(video), ReaderSettings())
    assert time.monotonic() - started >= 1.5, "ten frames at 5/s take 1.8 s, as from a camera"
    assert [f.index for f in frames] == list(range(10))
    assert frames[3].pts_s == pytest.approx(0.6) and frames[0].image is not None and frames[0].image.shape == (48, 64, 3)
    assert stats.status == "ended" and stats.read == 10 and stats.reconnects == 0


def test_a_looped_file_goes_on_counting_until_max_frames(tmp_path):
    video = write_video(tmp_path / "short.mp4", 4, fps=25)
    frames, stats = run_reader(str(video), ReaderSettings(loop=True, max_frames=11))
    assert [f.index for f in frames] == list(range(11))
    assert stats.status == "ended"


def test_fps_sampling_skips_frames_without_calling_them_drops(tmp_path):
    video = write_video(tmp_path / "fast.mp4", 25, fps=25)
    frames, stats = run_reader(str(video), ReaderSettings(fps=5))
    assert 4 <= len(frames) <= 6 and stats.skipped == 25 - len(frames) and stats.dropped == 0


def test_an_unreachable_camera_is_retried_with_backoff_then_given_up(tmp_path):
    url = f"rtsp://127.0.0.1:{free_port()}/cam"
    frames, stats = run_reader(url, ReaderSettings(max_reconnects=2, reconnect_initial_s=0.2))
    assert frames == [] and stats.status == "failed"
    assert stats.reconnects == 2 and stats.source_errors == 3
    assert "Connection refused" in (stats.last_error or "") and url in (stats.last_error or "")


def test_a_corrupt_file_fails_at_once_and_is_not_retried(tmp_path):
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(np.random.default_rng(1).bytes(5000))
    frames, stats = run_reader(str(corrupt), ReaderSettings())
    assert frames == [] and stats.status == "failed" and stats.reconnects == 0
    assert "Invalid data" in (stats.last_error or "")


def test_hardware_decoding_that_is_not_there_is_an_error_not_a_silent_cpu_fallback(tmp_path):
    video = write_video(tmp_path / "clip.mp4", 2)
    spec = parse_source(str(video))
    with pytest.raises(FatalSourceError, match="'nonsense' is not built into this PyAV"):
        open_video(spec, DecodeOptions(hwaccel="nonsense"))
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU is here: CUDA decoding may well work")
    with pytest.raises(FatalSourceError, match="hardware decoding 'cuda' is not available here"):
        open_video(spec, DecodeOptions(hwaccel="cuda"))
