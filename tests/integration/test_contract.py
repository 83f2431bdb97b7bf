"""The clients read the ensemble's contract from the restricted session server (fixture `triton_server`)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from clients import DetectionClient, ModelInfo, RestrictedApiError, RetryPolicy, load_model_info
from clients.detect import main as detect_main
from generator.synthetic import encode, make_scene
from tests.integration.helpers import MODES, PROTOCOLS, metric, metric_delta, run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    rng = np.random.default_rng(11)
    return [encode(make_scene(rng, 640, 480).image, ".jpg") for _ in range(3)]


@pytest.fixture(scope="module")
def named(triton_server, images):
    """Results with the admin key: the config gives batch limit and class names."""
    with DetectionClient(triton_server.grpc_url, admin_key=triton_server.admin_key) as client:
        assert client.model_info.max_batch_size == 8 and client.model_info.class_names
        return client.model_info, [client.detect(image) for image in images]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_without_the_key_the_metadata_is_enough(triton_server, images, named, mode, protocol):
    info, expected = named
    batch = [images[i % len(images)] for i in range(info.max_batch_size + 3)]
    successes = metric(triton_server, "nv_inference_request_success")
    results = run(mode, triton_server, protocol, "detect_many", batch, admin_key=None)
    # The first request carried all 11 images; Triton refused it before any model saw it (no failure is
    # counted), naming the limit; then 8 + 3 went through.
    assert metric_delta(triton_server, "nv_inference_request_success", successes, 2) == 2
    for i, result in enumerate(results):
        reference = expected[i % len(images)]
        np.testing.assert_array_equal(result.class_ids, reference.class_ids)
        np.testing.assert_allclose(result.boxes, reference.boxes, atol=1e-3)
        assert [d.class_name for d in result] == [f"class_{c}" for c in reference.class_ids]


def test_learned_limit_is_kept(triton_server, images):
    with DetectionClient(triton_server.http_url, protocol="http") as client:
        assert client.model_info == ModelInfo("yolo", None, ())
        assert len(client.detect_many(images * 3)) == 9
        assert client.model_info == ModelInfo("yolo", 8, ())


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_key_is_restricted_and_not_retried(triton_server, images, mode, protocol, caplog):
    caplog.set_level(logging.DEBUG, logger="clients.retry")
    patient = RetryPolicy(attempts=10, initial_backoff_s=0.5, max_backoff_s=0.5)
    with pytest.raises(RestrictedApiError, match="restricts this API to its admin key") as info:
        run(mode, triton_server, protocol, "detect", images[0], admin_key="0" * 64, retry=patient)
    assert "expecting header" in str(info.value)
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_a_shipped_config_gives_the_names_without_any_config_call(triton_server, images, named):
    info, expected = named
    shipped = load_model_info(triton_server.repository / "yolo")
    assert shipped == info
    with DetectionClient(triton_server.grpc_url, model_info=shipped) as client:
        assert [d.class_name for d in client.detect(images[0])] == [d.class_name for d in expected[0]]


def test_cli_with_the_shipped_config(triton_server, images, named, tmp_path, capsys):
    _, expected = named
    path = tmp_path / "scene.jpg"
    path.write_bytes(images[0])
    config = triton_server.repository / "yolo" / "config.pbtxt"
    assert detect_main([str(path), "--url", triton_server.grpc_url, "--json", "--model-config", str(config)]) == 0
    detections = json.loads(capsys.readouterr().out)["detections"]
    assert [d["class_name"] for d in detections] == [d.class_name for d in expected[0]]


def test_cli_without_key_or_config_says_why_classes_are_numbered(triton_server, images, tmp_path, capsys):
    path = tmp_path / "scene.jpg"
    path.write_bytes(images[0])
    assert detect_main([str(path), "--url", f"http://{triton_server.http_url}", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("note: class names unknown (the server restricts its model config)")
    assert all(d["class_name"].startswith("class_") for d in json.loads(captured.out)["detections"])
