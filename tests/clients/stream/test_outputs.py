"""What a stream run writes: JSON lines, the summary table, Prometheus metrics, annotated MP4 files."""

from __future__ import annotations

import io
import json
import time
import urllib.request

import numpy as np

from clients.detection import Detection, DetectionResult
from clients.stream.cli import main
from clients.stream.frame import Frame, encode_jpeg
from clients.stream.metrics import serve_metrics
from clients.stream.output import JsonLines, summary_table
from clients.stream.sender import Answer
from clients.stream.stats import StreamStats
from clients.stream.video_out import AnnotatedVideos

RESULT = DetectionResult(detections=(Detection((4.0, 4.0, 20.0, 20.0), 0.9, 1, "square"),))


def answer(index: int, image: np.ndarray) -> Answer:
    return Answer("cam", Frame(index, time.monotonic(), 1_700_000_000.25, index / 5, image=image),
                  encode_jpeg(image), RESULT, 12.345)


def test_one_json_object_per_answered_frame():
    out = io.StringIO()
    JsonLines(out)(answer(7, np.zeros((32, 32, 3), np.uint8)))
    record = json.loads(out.getvalue())
    assert record == {"stream": "cam", "frame": 7, "timestamp": 1_700_000_000.25, "pts_s": 1.4, "latency_ms": 12.35,
                      "detections": [{"box": [4.0, 4.0, 20.0, 20.0], "score": 0.9, "class_id": 1,
                                      "class_name": "square"}]}


def test_the_summary_table_names_every_stream_and_the_error_of_a_dead_one():
    ok, dead = StreamStats("front-door"), StreamStats("yard")
    ok.add(read=5, sent=5)
    ok.latency(30.0)
    dead.status = "failed"
    dead.error("cannot open rtsp://***@yard/x: Connection refused")
    lines = summary_table([ok.summary(), dead.summary()])
    assert lines[1].startswith("front-door") and "30" in lines[1]
    assert "yard" in lines[2] and "Connection refused" in lines[3]


def test_prometheus_metrics_read_the_live_counters():
    stats = StreamStats("cam0")
    port = serve_metrics(lambda: [stats], 0)
    stats.add(read=3, sent=2, dropped=1)
    stats.latency(40.0)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'detection_stream_read_frames_total{stream="cam0"} 3.0' in text
    assert 'detection_stream_dropped_frames_total{stream="cam0"} 1.0' in text
    assert 'detection_stream_answered_frames_total{stream="cam0"} 1.0' in text
    assert 'detection_stream_latency_seconds{quantile="0.95",stream="cam0"} 0.04' in text


def test_annotated_video_has_one_frame_per_answer(tmp_path):
    import av

    videos = AnnotatedVideos(tmp_path, fps=5)
    for index in range(6):
        image = np.full((48, 63, 3), 40 * index % 256, np.uint8)  # an odd width: the encoder needs even sides
        videos(answer(index, image))
    videos.close()
    with av.open(str(tmp_path / "cam.mp4")) as container:
        frames = [f.to_ndarray(format="bgr24") for f in container.decode(video=0)]
    assert len(frames) == 6 and frames[0].shape == (48, 62, 3)
    assert frames[0][4:20, 4].mean() > 60, "the box is drawn"


def test_cli_help_and_user_errors(capsys, tmp_path):
    assert main(["--help"]) == 0
    assert "--in-flight" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.mp4")]) == 1
    assert "video file not found" in capsys.readouterr().err
    video = tmp_path / "a.mp4"
    video.write_bytes(b"x")
    assert main([str(video), "--jpeg-quality", "0"]) == 1
    assert "--jpeg-quality must be 1..100" in capsys.readouterr().err
    assert main([str(video), "--ca-cert", str(tmp_path / "ca.pem")]) == 1
    assert "--ca-cert needs a grpcs:// or https:// URL" in capsys.readouterr().err


def test_ca_certificates_reach_the_grpc_and_http_clients(tmp_path):
    import ssl

    from clients.endpoint import tls_options
    from tests.deploy.pod import make_certificate

    cert = make_certificate(tmp_path)
    assert tls_options("grpcs://h:8444", None, cert) == {"root_certificates": str(cert)}
    context = tls_options("https://h:8443", None, cert)["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.cert_store_stats()["x509"] == 1
    assert tls_options("grpc://h:8001", None, None) == {}


def test_cli_says_so_in_one_line_when_no_server_answers(capsys, tmp_path):
    from generator.server.ports import free_port

    video = tmp_path / "a.mp4"
    video.write_bytes(b"x")
    assert main([str(video), "--url", f"127.0.0.1:{free_port()}", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "not ready" in err[-1]


def test_a_classifiers_answer_carries_its_top_classes():
    from clients.detection import Classification
    from clients.stream.output import answer_record

    image = np.zeros((8, 8, 3), np.uint8)
    result = DetectionResult((), (Classification(3, "dog", 0.5),))
    record = answer_record(Answer("cam", Frame(0, time.monotonic(), 1.0, 0.0, image=image), encode_jpeg(image),
                                  result, 1.0))
    assert record["detections"] == [] and record["top"] == [{"class_id": 3, "class_name": "dog", "score": 0.5}]
    assert "top" not in answer_record(answer(0, image))
