"""Pose, OBB, segmentation and classification exports built with the defaults and served by the real embedded Triton return
what Ultralytics' own predict returns on the same ONNX and the same images.

The exports are yolo11n-pose and yolo11n-obb from the packaged YAMLs (``tests/fixtures/ultralytics``, refilled so
that the synthetic scenes give detections: a comparison of two empty outputs would prove nothing, and the test
asserts there are some). What predict returned is recorded by ``tests/fixtures/ultralytics/predict.py`` in the
Ultralytics environment (CI has none); the test first checks that the fixture and the scene pixels are those the
record was made from. Tolerances are the issue's: boxes and keypoints within 1 px, rotated boxes within 1 px and 1
degree, masks (at the source size, RLE) at an IoU of 0.95 or more, classes equal (a classifier's top 5 in order).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from clients import DetectionClient
from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving.contract import (
    IMAGE,
    KEYPOINTS,
    MASK_SIZE,
    MASKS,
    ROTATED_BOXES,
    TASK_OUTPUTS,
    TOP_CLASSES,
    TOP_SCORES,
)
from generator.synthetic import encode
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import (
    PREDICTIONS,
    TASK_FIXTURES,
    digest,
    fixture_digest,
    recorded_predictions,
    scene_images,
)
from tests.integration.task_expectations import same_as_predict

pytestmark = pytest.mark.integration



def model_name(key: str) -> str:
    return key.replace("-", "_")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("tasks")
    repositories = []
    for key in TASK_FIXTURES:
        repository = root / f"repo-{key}"
        build_repository(fixtures.write(key, root / "onnx"), repository, BuildOptions(name=model_name(key)))
        repositories.append(repository)
    with EmbeddedServer(repositories[0], free_port(), free_port(), free_port(), log_file=root / "tritonserver.log",
                        extra_args=tuple(f"--model-repository={r}" for r in repositories[1:])) as running:
        yield running


def served(server: EmbeddedServer, key: str, image: bytes) -> dict[str, np.ndarray]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput(IMAGE, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=object).reshape(1, 1))
    names = TASK_OUTPUTS[TASK_FIXTURES[key]]
    result = client.infer(model_name(key), [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in names])
    return {name: result.as_numpy(name)[0] for name in names}


def recorded(key: str) -> dict[str, object]:
    entry = recorded_predictions()["models"][key]
    assert entry["fixture_sha256"] == fixture_digest(key), (
        f"{PREDICTIONS.name} was recorded from another {key} fixture: run tests/fixtures/ultralytics/predict.py")
    return entry


@pytest.mark.parametrize("key", list(TASK_FIXTURES))
def test_served_task_outputs_equal_ultralytics_predict(server: EmbeddedServer, key: str) -> None:
    entry = recorded(key)
    counts = []
    for index, (image, expected) in enumerate(zip(scene_images(), entry["images"], strict=True)):  # type: ignore[call-overload]
        assert expected["pixels_sha256"] == digest(image.tobytes()), f"scene {index} is not the recorded one"
        try:
            counts.append(same_as_predict(served(server, key, encode(image, ".png")), expected,
                                           TASK_FIXTURES[key]))
        except AssertionError as exc:
            raise AssertionError(f"{key} scene {index}: {exc}") from exc
    if TASK_FIXTURES[key] == "classify":  # the scenes are told apart: not one answer for every image
        answers: list[dict[str, list]] = entry["images"]  # type: ignore[assignment]
        assert len({tuple(answer["classes"]) for answer in answers}) >= 3
        assert len({round(answer["scores"][0], 3) for answer in answers}) >= 5
    else:
        assert max(counts) >= 3 and sum(counts) >= 10, f"{key}: too few detections to compare ({counts})"


@pytest.mark.parametrize("key", list(TASK_FIXTURES))
def test_the_detection_client_reads_each_task_from_the_metadata(server: EmbeddedServer, key: str) -> None:
    image = encode(scene_images()[3], ".png")
    raw = served(server, key, image)
    with DetectionClient(server.grpc_url, model=model_name(key)) as client:
        result = client.detect(image)
        assert client.model_info.task == TASK_FIXTURES[key]
    if key == "classify-static":
        assert len(result) == 0 and [c.class_id for c in result.top] == raw[TOP_CLASSES].tolist()
        np.testing.assert_allclose([c.score for c in result.top], raw[TOP_SCORES])
        assert result.top[0].class_name == str(raw[TOP_CLASSES][0])  # the fixture's names are its indices
        return
    count = int(raw["num_detections"][0])
    assert len(result) == count >= 3
    first = result.detections[0]
    if key == "pose-static":
        np.testing.assert_allclose(np.array(first.keypoints), raw[KEYPOINTS][0])
    elif key == "obb-static":
        np.testing.assert_allclose(np.array(first.rotated_box), raw[ROTATED_BOXES][0])
    else:
        assert first.mask_rle == raw[MASKS][0] and first.mask_size == tuple(raw[MASK_SIZE])
        assert first.as_dict()["mask"]["size"] == list(raw[MASK_SIZE])


@pytest.mark.parametrize("key", list(TASK_FIXTURES))
def test_a_batch_returns_each_image_what_it_returns_alone(server: EmbeddedServer, key: str) -> None:
    images = [encode(image, ".png") for image in scene_images()[2:5]]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput(IMAGE, [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object).reshape(-1, 1))
    names = TASK_OUTPUTS[TASK_FIXTURES[key]]
    together = client.infer(model_name(key), [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in names])
    for index, image in enumerate(images):
        alone = served(server, key, image)
        for name in names:
            got = together.as_numpy(name)[index]
            if got.dtype == object:
                assert got.tolist() == alone[name].tolist(), name
            else:
                np.testing.assert_allclose(got, alone[name], atol=1e-4, err_msg=name)


def test_a_bad_image_fails_alone_and_the_task_ensemble_keeps_serving(server: EmbeddedServer) -> None:
    from tritonclient.utils import InferenceServerException

    good = encode(scene_images()[3], ".png")
    with pytest.raises(InferenceServerException, match="invalid image"):
        served(server, "seg-static", good[: len(good) // 2])
    assert int(served(server, "seg-static", good)["num_detections"][0]) > 0


def test_validate_through_triton_reads_the_classifiers_top_classes(server: EmbeddedServer) -> None:
    from generator.operate.served_check import served_top_classes

    images = [encode(image, ".png") for image in scene_images()]
    top = served_top_classes(server.grpc_url, model_name("classify-static"), images)
    assert top.tolist() == [image["classes"] for image in recorded("classify-static")["images"]]  # type: ignore[attr-defined]
