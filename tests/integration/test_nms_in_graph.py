"""An ensemble built with --nms-in-graph, served by the real embedded Triton: the same detections as the
in-process reference (ONNX Runtime on the original export, then the Python NMS step), hostile input still
failing alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.evaluation.reference import ReferencePipeline
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from tests.integration.helpers import assert_matches_reference, infer, scene_bytes

pytestmark = pytest.mark.integration
MODEL = "yolo_graph_nms"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("graph_nms")
    build_repository(DEMO_ONNX, root / "repo", BuildOptions(name=MODEL, nms_in_graph=True, instances=(1, 1, 1)))
    log = root / "tritonserver.log"
    with EmbeddedServer(root / "repo", free_port(), free_port(), free_port(), log_file=log) as running:
        yield running


@pytest.mark.parametrize("size", [(640, 480), (1280, 720), (333, 517)])
def test_detections_equal_the_reference_with_python_nms(server: EmbeddedServer, size: tuple[int, int]) -> None:
    reference = ReferencePipeline(Path(DEMO_ONNX))
    images = [scene_bytes(seed=sum(size) + i, width=size[0], height=size[1]) for i in range(3)]
    served = infer(server, MODEL, images)
    assert served["num_detections"].sum() > 0
    for index, image in enumerate(images):
        assert_matches_reference(served, reference.detect(image), index)


def test_a_bad_image_fails_alone_and_the_next_request_succeeds(server: EmbeddedServer) -> None:
    with pytest.raises(InferenceServerException, match="invalid image: truncated JPEG"):
        infer(server, MODEL, [scene_bytes(1, 640, 480)[:-200]])
    assert infer(server, MODEL, [scene_bytes(2, 640, 480)])["num_detections"][0, 0] >= 0
