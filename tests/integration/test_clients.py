"""The clients against the real embedded Triton serving the demo ensemble (session fixture `triton_server`).

Every result is compared with the in-process FP32 reference (same ONNX, preprocessing and NMS), so these
tests check the wire format, batching, decoding and error mapping, not only that "something came back".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from clients import ClientTimeoutError, DetectionClient, InferenceError
from clients.detect import main as detect_main
from generator.evaluation.reference import ReferencePipeline
from generator.synthetic import encode, make_scene
from tests.integration.helpers import MODES, PROTOCOLS, metric, metric_delta, run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BOX_ATOL = 1e-2
SCORE_ATOL = 1e-4
# Odd sizes and both codecs, so the letterbox way back is exercised in both directions.
SIZES = ((640, 480), (320, 240), (800, 600), (497, 375), (300, 500), (1024, 576))


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    rng = np.random.default_rng(20240607)
    return [
        encode(make_scene(rng, w, h).image, ".png" if i % 2 else ".jpg") for i, (w, h) in enumerate(SIZES)
    ]


@pytest.fixture(scope="module")
def reference(triton_server) -> ReferencePipeline:
    return ReferencePipeline(triton_server.onnx_path)


@pytest.fixture(scope="module")
def max_batch(triton_server) -> int:
    with DetectionClient(triton_server.grpc_url, model=triton_server.model_name,
                         admin_key=triton_server.admin_key) as client:
        size = client.model_info.max_batch_size
    assert size is not None, "the test model declares its max_batch_size"
    return size


@pytest.fixture(scope="module")
def expected(reference, images):
    found = [reference.detect(image) for image in images]
    # Comparing empty lists would prove nothing: the demo detector must find something in these scenes.
    assert sum(len(d.scores) for d in found) >= len(images)
    return found


def assert_matches(result, ref, class_names) -> None:
    assert len(result) == len(ref.scores)
    np.testing.assert_allclose(result.boxes, ref.boxes, atol=BOX_ATOL, rtol=0)
    np.testing.assert_allclose(result.scores, ref.scores, atol=SCORE_ATOL, rtol=0)
    np.testing.assert_array_equal(result.class_ids, ref.classes)
    assert [d.class_name for d in result] == [class_names[int(c)] for c in ref.classes]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_detect_matches_reference(triton_server, reference, images, expected, mode, protocol):
    for image, ref in zip(images, expected, strict=True):
        assert_matches(run(mode, triton_server, protocol, "detect", image), ref, reference.class_names)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_detect_many_is_one_request(triton_server, reference, images, expected, max_batch, mode, protocol):
    count = min(len(images), max_batch)
    assert count >= 2, "the demo ensemble should batch"
    requests = metric(triton_server, "nv_inference_request_success")
    inferences = metric(triton_server, "nv_inference_count")
    results = run(mode, triton_server, protocol, "detect_many", images[:count])
    assert metric_delta(triton_server, "nv_inference_request_success", requests, 1) == 1
    assert metric_delta(triton_server, "nv_inference_count", inferences, count) == count
    for result, ref in zip(results, expected[:count], strict=True):
        assert_matches(result, ref, reference.class_names)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_detect_many_splits_at_max_batch_size(
    triton_server, reference, images, expected, max_batch, mode, protocol
):
    count = max_batch + 3
    batch = [images[i % len(images)] for i in range(count)]
    requests = metric(triton_server, "nv_inference_request_success")
    results = run(mode, triton_server, protocol, "detect_many", batch)
    assert metric_delta(triton_server, "nv_inference_request_success", requests, 2) == 2
    assert len(results) == count
    for i, result in enumerate(results):
        assert_matches(result, expected[i % len(images)], reference.class_names)


def test_class_names_come_from_the_ensemble(triton_server, reference):
    key = triton_server.admin_key
    with DetectionClient(triton_server.grpc_url, model=triton_server.model_name, admin_key=key) as grpc_client:
        grpc_info = grpc_client.model_info
    with DetectionClient(
        triton_server.http_url, protocol="http", model=triton_server.model_name, admin_key=key
    ) as http_client:
        http_info = http_client.model_info
    assert grpc_info == http_info
    assert grpc_info.class_names == tuple(reference.class_names)
    assert grpc_info.max_batch_size is not None and grpc_info.max_batch_size >= 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_bad_image_is_rejected_then_server_still_serves(
    triton_server, reference, images, expected, mode, protocol
):
    for bad in (b"this is not an image", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64):
        with pytest.raises(InferenceError) as info:
            run(mode, triton_server, protocol, "detect", bad)
        message = str(info.value)
        assert message and "Traceback" not in message
        assert info.value.status is not None
        assert_matches(
            run(mode, triton_server, protocol, "detect", images[0]), expected[0], reference.class_names
        )
    # One bad image fails its whole request (one request per batch); the next request is fine.
    with pytest.raises(InferenceError):
        run(mode, triton_server, protocol, "detect_many", [images[1], b"garbage", images[2]])
    results = run(mode, triton_server, protocol, "detect_many", images[1:3])
    for result, ref in zip(results, expected[1:3], strict=True):
        assert_matches(result, ref, reference.class_names)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_bad_image_in_a_later_request_is_located(triton_server, images, max_batch, mode, protocol):
    batch = [images[i % len(images)] for i in range(max_batch + 2)]
    batch[max_batch + 1] = b"not an image either"
    with pytest.raises(
        InferenceError, match=rf"^request for images {max_batch}\.\.{max_batch + 1}: "
    ) as info:
        run(mode, triton_server, protocol, "detect_many", batch)
    # Triton's own text is kept: it is what the second request alone gets.
    with pytest.raises(InferenceError) as alone:
        run(mode, triton_server, protocol, "detect_many", batch[max_batch:])
    assert str(info.value).endswith(f": {alone.value}")
    assert info.value.status == alone.value.status


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_unknown_model_is_an_inference_error(triton_server, mode, protocol, images):
    with pytest.raises(InferenceError, match="no_such_model"):
        run(mode, triton_server, protocol, "detect", images[0], model="no_such_model")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tiny_timeout_raises_and_server_recovers(triton_server, reference, images, expected, protocol):
    # 1 ms cannot fit a config fetch plus four 1024x576 images through the ensemble on a CPU.
    with pytest.raises(ClientTimeoutError):
        run("sync", triton_server, protocol, "detect_many", [images[5]] * 4, timeout_s=1e-3)
    assert_matches(
        run("sync", triton_server, protocol, "detect", images[5]), expected[5], reference.class_names
    )


@pytest.mark.parametrize("mode", MODES)
def test_wait_until_ready(triton_server, mode):
    for protocol in PROTOCOLS:
        assert run(mode, triton_server, protocol, "wait_until_ready", 10.0) is None


def test_cli_json_and_annotate(triton_server, reference, images, expected, tmp_path, capsys):
    paths = []
    for i, data in enumerate(images):
        path = tmp_path / "in" / f"scene{i}{'.png' if i % 2 else '.jpg'}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        paths.append(path)
    out_dir = tmp_path / "annotated"
    argv = [
        *map(str, paths),
        "--url",
        triton_server.grpc_url,
        "--json",
        "--annotate",
        str(out_dir),
        "--batch",
        "4",
        "--admin-token",
        triton_server.admin_key,
    ]
    assert detect_main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(paths)
    for line, path, ref, data in zip(lines, paths, expected, images, strict=True):
        obj = json.loads(line)
        assert obj["image"] == str(path)
        assert len(obj["detections"]) == len(ref.scores)
        for det, box, score, cls in zip(obj["detections"], ref.boxes, ref.scores, ref.classes, strict=True):
            np.testing.assert_allclose(det["box"], box, atol=BOX_ATOL, rtol=0)
            assert det["score"] == pytest.approx(float(score), abs=SCORE_ATOL)
            assert det["class_id"] == int(cls)
            assert det["class_name"] == reference.class_names[int(cls)]
        annotated = cv2.imread(str(out_dir / path.name))
        original = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert annotated is not None and original is not None and annotated.shape == original.shape
        if len(ref.scores) and path.suffix == ".png":  # lossless: drawing must have changed pixels
            assert (annotated != original).any()


def test_cli_table_over_http_as_a_module(triton_server, images, expected, tmp_path):
    path = tmp_path / "one.jpg"
    path.write_bytes(images[0])
    proc = subprocess.run(
        [sys.executable, "-m", "clients.detect", str(path), "--url", f"http://{triton_server.http_url}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0]
        == f"{path}: {len(expected[0].scores)} detection{'' if len(expected[0].scores) == 1 else 's'}"
    )
    assert len(lines) == 1 + (1 + len(expected[0].scores) if len(expected[0].scores) else 0)


def test_cli_bad_image_exits_1(triton_server, tmp_path, capsys):
    path = tmp_path / "broken.jpg"
    path.write_bytes(b"\xff\xd8\xff not a jpeg")
    assert detect_main([str(path), "--url", triton_server.grpc_url]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
