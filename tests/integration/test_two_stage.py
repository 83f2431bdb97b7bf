"""A two-stage build (``build --classifier``: the yolo11 detector fixture, then the yolo11n-cls classifier fixture
on the crop of each kept box) served by the real embedded Triton returns, per box, what Ultralytics' classifier
predict returns on the crop ``save_one_box`` makes from the served box.

The reference is recorded by ``tests/fixtures/ultralytics/two_stage.py`` (boxes from this ensemble, classes from
Ultralytics; CI has no Ultralytics); the test checks first that the fixtures, the scenes and the served boxes are
those it was recorded from. The scenes give zero detections (three of them), more than ``--classify-boxes`` (20)
and one just above it: the rows past the cap stay zero, the detections there are still returned.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from clients import AsyncDetectionClient, DetectionClient, DetectionResult
from clients.annotate import draw_detections
from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions, GateOptions
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving.contract import (
    BOX_CLASSES,
    BOX_SCORES,
    IMAGE,
    NUM_DETECTIONS,
    TWO_STAGE_OUTPUT_DATATYPES,
    TWO_STAGE_OUTPUTS,
)
from generator.synthetic import encode
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import digest, fixture_digest, scene_images
from tests.fixtures.ultralytics.two_stage import CLASSIFIER, CLASSIFY_BOXES, DETECTOR, MODEL
from tests.integration.two_stage import infer, reference

pytestmark = pytest.mark.integration


FP16 = "two_stage_fp16"


@pytest.fixture(scope="module")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("two-stage")
    detector, classifier = fixtures.write(DETECTOR, root / "onnx"), fixtures.write(CLASSIFIER, root / "onnx")
    build_repository(detector, root / "repo", BuildOptions(name=MODEL, classifier=classifier))  # the defaults
    # FP16 for both models, served as asked (on a CPU the speed gate would keep FP32: off), without the accuracy gate
    # (random weights have no accuracy to keep; the classify gate is test_task_precision's)
    fp16 = BuildOptions(name=FP16, classifier=classifier, precision="fp16",
                        gate=GateOptions(enabled=False, speed_gate="off"))
    build_repository(detector, root / "repo-fp16", fp16)
    return {MODEL: root / "repo", FP16: root / "repo-fp16"}


@pytest.fixture(scope="module")
def server(repositories: dict[str, Path]) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(repositories[MODEL], free_port(), free_port(), free_port(),
                        log_file=repositories[MODEL].parent / "tritonserver.log",
                        extra_args=(f"--model-repository={repositories[FP16]}",)) as running:
        yield running


def test_each_box_is_classified_as_ultralytics_classifies_its_save_one_box_crop(server: EmbeddedServer) -> None:
    recorded = reference()
    assert recorded["classifier_sha256"] == fixture_digest(CLASSIFIER), "re-record: two_stage.py serve, record"
    assert recorded["detector_sha256"] == fixture_digest(DETECTOR), "re-record: two_stage.py serve, record"
    counts = []
    for index, (image, expected) in enumerate(zip(scene_images(), recorded["scenes"], strict=True)):
        assert expected["pixels_sha256"] == digest(image.tobytes()), f"scene {index} is not the recorded one"
        out = infer(server.grpc_url, MODEL, encode(image, ".png"))
        count = int(out[NUM_DETECTIONS][0])
        rows = min(count, CLASSIFY_BOXES)
        counts.append(count)
        # the boxes the reference cropped are the ones served (else it compares other crops)
        np.testing.assert_allclose(out["detection_boxes"][:rows], np.array(expected["boxes"]).reshape(-1, 4),
                                   atol=1e-3, err_msg=f"scene {index}: re-record the reference")
        assert out[BOX_CLASSES][:rows].tolist() == expected["classes"], f"scene {index}"
        np.testing.assert_allclose(out[BOX_SCORES][:rows], np.array(expected["scores"]).reshape(rows, out[BOX_SCORES].shape[1]),
                                   atol=1e-5, err_msg=f"scene {index}")
        assert not out[BOX_CLASSES][rows:].any() and not out[BOX_SCORES][rows:].any(), "padding rows are zero"
    assert counts.count(0) >= 2 and max(counts) > CLASSIFY_BOXES, f"the scenes must cover both edges: {counts}"
    # the crops are told apart (the refilled classifier's best class is mostly the same one; its top 5 are not)
    answers = [(tuple(c), round(p[0], 3))
               for s in recorded["scenes"] for c, p in zip(s["classes"], s["scores"], strict=True)]
    assert len({c for c, _ in answers}) >= 10 and len({p for _, p in answers}) >= 20


def test_a_batch_classifies_each_image_as_alone(server: EmbeddedServer) -> None:
    images = [encode(image, ".png") for image in scene_images()[1:5]]  # 0, 100, 21 and 43 detections
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput(IMAGE, [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object).reshape(-1, 1))
    together = client.infer(MODEL, [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in TWO_STAGE_OUTPUTS])
    for index, image in enumerate(images):
        alone = infer(server.grpc_url, MODEL, image)
        for name in TWO_STAGE_OUTPUTS:
            np.testing.assert_allclose(together.as_numpy(name)[index], alone[name], atol=1e-5, err_msg=name)


def test_the_contract_and_the_detection_client_read_the_second_stage(server: EmbeddedServer) -> None:
    metadata = grpcclient.InferenceServerClient(server.grpc_url).get_model_metadata(MODEL, as_json=True)
    declared = {o["name"]: o["datatype"] for o in metadata["outputs"]}
    assert declared == TWO_STAGE_OUTPUT_DATATYPES  # the detection outputs unchanged, two added
    image = encode(scene_images()[3], ".png")
    raw = infer(server.grpc_url, MODEL, image)
    for protocol, url in (("grpc", server.grpc_url), ("http", server.http_url)):
        with DetectionClient(url, model=MODEL, protocol=protocol) as client:
            result = client.detect(image)
            assert client.model_info.second_stage
        assert len(result) == int(raw[NUM_DETECTIONS][0]) > CLASSIFY_BOXES
        classified = [d.classified for d in result]
        assert all(c is not None for c in classified[:CLASSIFY_BOXES])
        assert all(c is None for c in classified[CLASSIFY_BOXES:]), "boxes past the cap are not classified"
        first = classified[0]
        assert first is not None and [c.class_id for c in first] == raw[BOX_CLASSES][0].tolist()
        np.testing.assert_allclose([c.score for c in first], raw[BOX_SCORES][0], rtol=1e-6)
        assert first[0].class_name == str(raw[BOX_CLASSES][0][0])  # the fixture's names are its indices
    async def detect_async() -> DetectionResult:
        async with AsyncDetectionClient(server.http_url, model=MODEL, protocol="http") as client:
            return await client.detect(image)

    assert [d.classified for d in asyncio.run(detect_async())] == classified
    canvas = draw_detections(scene_images()[3][..., ::-1].copy(), result)
    assert canvas.shape == scene_images()[3].shape


def test_a_bad_image_fails_alone_and_the_two_stage_ensemble_keeps_serving(server: EmbeddedServer) -> None:
    good = encode(scene_images()[3], ".png")
    with pytest.raises(InferenceServerException, match="invalid image"):
        infer(server.grpc_url, MODEL, good[: len(good) // 2])
    assert int(infer(server.grpc_url, MODEL, good)[NUM_DETECTIONS][0]) > 0


def test_precision_applies_to_the_classifier_too(server: EmbeddedServer, repositories: dict[str, Path]) -> None:
    facts = json.loads((repositories[FP16] / "manifest.json").read_text())["precision_facts"]
    assert facts["classifier_precision"] == "fp16"
    graph = onnx.load(str(repositories[FP16] / f"{FP16}_classifier" / "1" / "model.onnx"))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.graph.initializer)
    agree = total = 0
    for image in scene_images()[2:5]:
        data = encode(image, ".png")
        full, half = infer(server.grpc_url, MODEL, data), infer(server.grpc_url, FP16, data)
        rows = min(int(half[NUM_DETECTIONS][0]), CLASSIFY_BOXES)
        assert rows > 0 and not half[BOX_SCORES][rows:].any()
        scores = half[BOX_SCORES][:rows]
        assert ((scores > 0) & (scores <= 1)).all() and (np.diff(scores, axis=1) <= 0).all()  # a softmax, best first
        agree += int((half[BOX_CLASSES][:rows, 0] == full[BOX_CLASSES][:rows, 0]).sum())
        total += rows
    assert agree >= 0.9 * total, f"FP16 top-1 agrees with FP32 on {agree} of {total} boxes"
