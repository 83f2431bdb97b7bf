"""--cpu-engine openvino served by the real embedded Triton beside the default build: the server takes OpenVINO's stub
environment from the configs, the detector checks its engine on the build's control images at load, and every
request gets the default build's detections (boxes within a hundredth of a pixel: another engine's kernels round
the last bits differently), one request at a time and batched together."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.environments import STUB_OPENVINO, stub_environment_for
from generator.server.ports import free_port
from tests.integration.helpers import infer, scene_bytes

pytestmark = pytest.mark.integration
DEFAULT, OPENVINO = "yolo_ort", "yolo_ov"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, Path]]:
    root = tmp_path_factory.mktemp("cpu_engine")
    build_repository(DEMO_ONNX, root / "default", BuildOptions(name=DEFAULT))
    built = build_repository(DEMO_ONNX, root / "openvino", BuildOptions(name=OPENVINO, cpu_engine="openvino"))
    assert "--cpu-engine" in built.manifest.rebuild and "openvino" in built.manifest.rebuild
    stub = stub_environment_for([root / "default", root / "openvino"])
    assert stub is STUB_OPENVINO
    log = root / "tritonserver.log"
    with EmbeddedServer(root / "default", free_port(), free_port(), free_port(), log_file=log, stub=stub,
                        extra_args=(f"--model-repository={root / 'openvino'}",)) as running:
        yield running, log


def assert_close(served: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(served["num_detections"], expected["num_detections"])
    np.testing.assert_array_equal(served["detection_classes"], expected["detection_classes"])
    np.testing.assert_allclose(served["detection_boxes"], expected["detection_boxes"], atol=1e-2)
    np.testing.assert_allclose(served["detection_scores"], expected["detection_scores"], atol=1e-4)


@pytest.mark.parametrize("batch", [1, 3])
def test_detections_equal_the_default_engines(served: tuple[EmbeddedServer, Path], batch: int) -> None:
    server, _ = served
    images = [scene_bytes(seed=170 + batch + i, width=1280 - 160 * i, height=720) for i in range(batch)]
    expected = infer(server, DEFAULT, images)
    assert expected["num_detections"].sum() > 0  # a comparison of empty outputs would prove nothing
    assert_close(infer(server, OPENVINO, images), expected)


def test_concurrent_requests_each_get_their_own_detections(served: tuple[EmbeddedServer, Path]) -> None:
    server, _ = served
    images = [scene_bytes(seed=180 + i, width=640 + 64 * i, height=480) for i in range(6)]
    expected = [infer(server, DEFAULT, [image]) for image in images]
    assert len({int(e["num_detections"][0, 0]) for e in expected}) > 1  # the images are told apart
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda image: infer(server, OPENVINO, [image]), images * 2))
    for answer, reference in zip(answers, expected * 2, strict=True):
        assert_close(answer, reference)


def test_each_instance_checked_its_engine_against_onnx_runtime_at_load(served: tuple[EmbeddedServer, Path]) -> None:
    _, log = served
    verdicts = [line for line in log.read_text(errors="replace").splitlines()
                if "detector: OpenVINO" in line and "control images" in line]
    assert len(verdicts) == 2, verdicts  # the default two detector instances
    for verdict in verdicts:
        assert "agrees with the CPU provider" in verdict and "too few detections" not in verdict, verdict
