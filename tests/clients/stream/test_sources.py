from __future__ import annotations

import pytest

from clients.errors import ClientError
from clients.stream.sources import parse_source, parse_sources, redact


def test_kinds_and_default_names():
    assert parse_source("rtsp://10.0.0.5:554/stream1").kind == "network"
    assert parse_source("rtsp://10.0.0.5:554/stream1").name == "stream1"
    assert parse_source("rtsps://cam.example/live/main").name == "live_main"
    camera = parse_source("0")
    assert (camera.kind, camera.location, camera.name) == ("camera", "/dev/video0", "camera0")
    assert parse_source("/dev/video2").name == "camera2"
    assert parse_source("clips/door.mp4").kind == "file" and parse_source("clips/door.mp4").name == "door"
    assert parse_source("rtsp://h/x").live and not parse_source("a.mp4").live


def test_names_given_by_the_user_and_urls_with_equals_signs():
    named = parse_source("gate=rtsp://h/path?user=x")
    assert (named.name, named.location, named.named) == ("gate", "rtsp://h/path?user=x", True)
    plain = parse_source("rtsp://h/path?user=x")
    assert plain.location == "rtsp://h/path?user=x" and not plain.named
    with pytest.raises(ClientError, match="bad stream name"):
        parse_source("bad name!=rtsp://h/x")


def test_credentials_never_reach_a_name_or_a_log():
    spec = parse_source("rtsp://admin:secret@10.0.0.5/cam")
    assert "secret" not in spec.shown and spec.shown == "rtsp://***@10.0.0.5/cam"
    assert "secret" not in spec.name
    assert redact("rtsp://10.0.0.5/cam") == "rtsp://10.0.0.5/cam"


def test_duplicate_default_names_are_numbered_and_explicit_ones_refused(tmp_path):
    video = tmp_path / "cam.mp4"
    video.write_bytes(b"x")
    specs = parse_sources([str(video), str(video), "cam=rtsp://h/a"])
    assert [s.name for s in specs] == ["cam-2", "cam-3", "cam"]
    with pytest.raises(ClientError, match="given twice: a"):
        parse_sources(["a=rtsp://h/1", "a=rtsp://h/2"])


def test_unusable_sources_fail_before_anything_starts(tmp_path):
    with pytest.raises(ClientError, match="video file not found"):
        parse_sources([str(tmp_path / "missing.mp4")])
    with pytest.raises(ClientError, match="unsupported source 'ftp://"):
        parse_source("ftp://h/x.mp4")
    with pytest.raises(ClientError, match="empty source"):
        parse_source("  ")
