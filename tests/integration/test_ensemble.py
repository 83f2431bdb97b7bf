"""The served ensemble against the in-process reference, and its behaviour under hostile input.

Every test talks to the real embedded Triton started by the ``triton_server`` fixture.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients.contract import admin_headers
from generator.evaluation.reference import ReferencePipeline
from generator.synthetic import encode, make_scene
from tests.integration.helpers import HOSTILE, assert_matches_reference, hostile_bytes, infer, scene_bytes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reference(triton_server) -> ReferencePipeline:
    return ReferencePipeline(triton_server.onnx_path)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("size", [(320, 320), (640, 480), (1280, 720), (333, 517)])
def test_served_detections_equal_reference(triton_server, reference, protocol, size) -> None:
    image = scene_bytes(seed=sum(size), width=size[0], height=size[1])
    served = infer(triton_server, triton_server.model_name, [image], protocol)
    expected = reference.detect(image)
    assert len(expected.scores) > 0, "the demo detector should find the synthetic shapes"
    assert_matches_reference(served, expected)


def test_boxes_are_in_source_pixels(triton_server) -> None:
    """Ground truth is known in the original 1280x720 frame: detections must land on it there.

    Every shape counts, the smallest (29 px, 14 px in the letterboxed input) too: the demo detector finds
    35 of these 37 (see its README), so a coordinate mapping that is off shows at once.
    """
    matched = total = 0
    for seed in range(7, 17):
        scene = make_scene(np.random.default_rng(seed), 1280, 720)
        served = infer(triton_server, triton_server.model_name, [encode(scene.image)])
        count = int(served["num_detections"][0, 0])
        boxes = served["detection_boxes"][0, :count]
        assert (boxes[:, [0, 2]] <= 1280).all() and (boxes[:, [1, 3]] <= 720).all() and (boxes >= 0).all()
        for truth in scene.boxes:
            total += 1
            matched += bool(count) and _iou(truth, boxes).max() > 0.5
    assert total >= 30
    assert matched >= 0.85 * total, f"only {matched} of {total} shapes found with IoU > 0.5"


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + areas - inter)


@pytest.mark.parametrize("model_attr", ["model_name", "static_model_name"])
def test_many_images_in_one_request(triton_server, reference, model_attr) -> None:
    images = [scene_bytes(100 + i, 640, 480) for i in range(3)]
    served = infer(triton_server, getattr(triton_server, model_attr), images)
    for index, expected in enumerate(reference.detect_many(images)):
        assert_matches_reference(served, expected, index)


@pytest.mark.parametrize("model_attr", ["model_name", "static_model_name"])
def test_concurrent_requests_are_batched_and_split_back(triton_server, reference, model_attr) -> None:
    """Concurrent requests land in one dynamic batch; each must get its own detections back."""
    images = [scene_bytes(200 + i, 800, 600) for i in range(12)]
    model = getattr(triton_server, model_attr)
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda image: infer(triton_server, model, [image]), images))
    for served, image in zip(results, images, strict=True):
        assert_matches_reference(served, reference.detect(image))


def test_empty_scene_returns_every_output_with_zero_detections(triton_server) -> None:
    blank = encode(np.full((480, 640, 3), 114, dtype=np.uint8))
    served = infer(triton_server, triton_server.model_name, [blank])
    assert served["num_detections"].tolist() == [[0]]
    assert served["detection_boxes"].shape == (1, 100, 4)
    assert served["detection_scores"].shape == (1, 100)
    assert served["detection_classes"].shape == (1, 100)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_image_is_rejected_alone_and_server_keeps_serving(triton_server, protocol, case) -> None:
    data = hostile_bytes(case)
    started = time.perf_counter()
    with pytest.raises(InferenceServerException) as error:
        infer(triton_server, triton_server.model_name, [data], protocol)
    elapsed = time.perf_counter() - started
    message = str(error.value)
    assert HOSTILE[case][1] in message
    assert "Traceback" not in message and "ensemble_pipeline" not in message
    assert elapsed < 2.0, f"rejecting {case} took {elapsed:.2f} s"
    # Triton QA habit: after every hostile request, a valid one succeeds.
    served = infer(triton_server, triton_server.model_name, [scene_bytes(5, 640, 480)], protocol)
    assert served["num_detections"][0, 0] > 0


def test_bad_request_fails_alone_within_a_batch(triton_server, reference) -> None:
    """One corrupt image among seven good camera frames, all at once (a full default batch of 8): only it fails."""
    good = [scene_bytes(300 + i, 1280, 720) for i in range(7)]
    requests = [*good[:2], b"\x89PNG broken", *good[2:]]

    def send(image: bytes):
        try:
            return infer(triton_server, triton_server.model_name, [image])
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        results = list(pool.map(send, requests))
    assert isinstance(results[2], InferenceServerException)
    for served, image in zip([r for i, r in enumerate(results) if i != 2], good, strict=True):
        assert not isinstance(served, Exception), served
        assert_matches_reference(served, reference.detect(image))


def test_one_bad_image_in_a_multi_image_request_names_its_position(triton_server) -> None:
    images = [scene_bytes(9, 640, 480), b"", scene_bytes(10, 640, 480)]
    with pytest.raises(InferenceServerException, match="image 1: empty image"):
        infer(triton_server, triton_server.model_name, images)


@pytest.mark.parametrize("kind", ["grayscale", "rgba", "16bit", "bmp", "webp", "tiff"])
def test_other_image_kinds_match_reference(triton_server, reference, kind) -> None:
    import cv2

    rgb = make_scene(np.random.default_rng(11), 640, 480).image
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if kind == "grayscale":
        data = cv2.imencode(".png", cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))[1].tobytes()
    elif kind == "rgba":
        data = cv2.imencode(".png", cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA))[1].tobytes()
    elif kind == "16bit":
        data = cv2.imencode(".png", bgr.astype(np.uint16) * 257)[1].tobytes()
    else:
        data = cv2.imencode(f".{kind}", bgr)[1].tobytes()
    served = infer(triton_server, triton_server.model_name, [data])
    expected = reference.detect(data)
    assert len(expected.scores) > 0
    assert_matches_reference(served, expected)


def test_ensemble_config_carries_class_names(triton_server, reference) -> None:
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    config = client.get_model_config(triton_server.model_name, as_json=True,
                                     headers=admin_headers("grpc", triton_server.admin_key))["config"]
    import json

    names = json.loads(config["parameters"]["class_names"]["string_value"])
    assert tuple(names) == reference.class_names


def test_both_head_layouts_are_served(triton_server) -> None:
    """The dynamic ensemble sends the reduced head to NMS, the static one the full v8 head."""
    from generator.model.onnx_inspect import inspect_onnx

    head = inspect_onnx(triton_server.onnx_path).output.shape  # [N, 4 + nc, A]
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    headers = admin_headers("grpc", triton_server.admin_key)
    for model, layout, rows in (("yolo", "v8_reduced", 6), ("yolo_static", "v8", head[1])):
        nms = client.get_model_config(f"{model}_nms", as_json=True, headers=headers)["config"]
        assert nms["parameters"]["layout"]["string_value"] == layout
        detector = client.get_model_config(f"{model}_detector", as_json=True, headers=headers)["config"]
        assert [int(d) for d in detector["output"][0]["dims"]] == [rows, head[2]]


def test_validate_through_the_server_scores_what_the_reference_scores(triton_server, capsys) -> None:
    import re

    from generator.cli import main

    code = main(["validate", "--model-repository", str(triton_server.repository), "--count", "16",
                 "--url", f"grpc://{triton_server.grpc_url}"])
    out = capsys.readouterr().out
    assert code == 0, out
    found = re.search(r"through Triton .*: mAP@0.5:0.95 ([\d.]+) \(FP32 .*: ([\d.]+)\)", out)
    assert found is not None, out
    served, local = found.groups()
    assert float(local) > 0.3
    assert served == local
