"""--fuse-preprocess (preprocess and detector in one Python step) served by the real embedded Triton beside the
default three-step build: the same outputs bit for bit, under concurrent load too, the preprocess step's refusals
word for word, and one step's phases covering both halves."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from loadtest.metrics import BATCHES, published_phases
from tests.integration.helpers import OUTPUTS, infer, png_declaring, scene_bytes

pytestmark = pytest.mark.integration
DEFAULT, FUSED = "yolo_steps", "yolo_fused"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("fused_preprocess")
    build_repository(DEMO_ONNX, root / "default", BuildOptions(name=DEFAULT))
    fused = build_repository(DEMO_ONNX, root / "fused", BuildOptions(name=FUSED, fuse_preprocess="on"))
    assert fused.models == (FUSED, f"{FUSED}_detector", f"{FUSED}_nms")
    assert "--fuse-preprocess" in fused.manifest.rebuild and "on" in fused.manifest.rebuild
    with EmbeddedServer(root / "default", free_port(), free_port(), free_port(), log_file=root / "tritonserver.log",
                        extra_args=(f"--model-repository={root / 'fused'}",)) as running:
        yield running


def assert_same(served: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for name in OUTPUTS:
        assert served[name].dtype == expected[name].dtype
        np.testing.assert_array_equal(served[name], expected[name], err_msg=name)


@pytest.mark.parametrize("batch", [1, 3])
def test_outputs_are_bit_equal_to_the_three_steps(server: EmbeddedServer, batch: int) -> None:
    images = [scene_bytes(seed=70 + batch + i, width=1280 - 160 * i, height=720) for i in range(batch)]
    expected = infer(server, DEFAULT, images)
    assert expected["num_detections"].sum() > 0  # a comparison of empty outputs would prove nothing
    assert_same(infer(server, FUSED, images), expected)


def test_concurrent_requests_each_get_their_own_detections(server: EmbeddedServer) -> None:
    """Requests batched together by Triton are split back per request: each image's answer is its own."""
    images = [scene_bytes(seed=80 + i, width=640 + 64 * i, height=480) for i in range(6)]
    expected = [infer(server, DEFAULT, [image]) for image in images]
    assert len({int(e["num_detections"][0, 0]) for e in expected}) > 1  # the images are told apart
    with ThreadPoolExecutor(6) as pool:
        rounds = [list(pool.map(lambda image: infer(server, FUSED, [image]), images)) for _ in range(3)]
    for served in rounds:
        for answer, reference in zip(served, expected, strict=True):
            assert_same(answer, reference)


def test_a_refused_image_gets_the_preprocess_message_and_the_rest_are_served(server: EmbeddedServer) -> None:
    bad = png_declaring(20000, 20000)
    messages = []
    for model in (DEFAULT, FUSED):
        with pytest.raises(InferenceServerException) as refused:
            infer(server, model, [scene_bytes(seed=90, width=640, height=480), bad])
        messages.append(refused.value.message())
    assert "invalid image: image 1" in messages[1]
    assert messages[0].replace(DEFAULT, FUSED) == messages[1], messages  # only the model names differ
    good = [scene_bytes(seed=91, width=640, height=480)]
    assert_same(infer(server, FUSED, good), infer(server, DEFAULT, good))


def test_one_step_publishes_both_halves_phases(server: EmbeddedServer) -> None:
    detector = f"{FUSED}_detector"
    before = published_phases(server.metrics_url, (detector,))
    for seed in range(2):
        infer(server, FUSED, [scene_bytes(seed=95 + seed, width=640, height=480)])
    after = published_phases(server.metrics_url, (detector,))
    spent = {phase: after[detector].get(phase, 0.0) - before.get(detector, {}).get(phase, 0.0)
             for phase in ("decode", "letterbox", "run", BATCHES)}
    assert spent[BATCHES] == 2 and all(spent[p] > 0 for p in ("decode", "letterbox", "run")), spent
