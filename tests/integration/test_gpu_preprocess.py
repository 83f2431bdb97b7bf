"""--preprocess-device gpu served by the embedded Triton next to the CPU preprocess (needs a CUDA GPU).

CI has no GPU, so this skips there; tools/gpu/gpu_proof.py ran the same comparison (and more) on the lent H200:
docs/results/gpu/2026-12-01-h200-proof.json, commands in docs/results/gpu/README.md.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tritonclient.utils import InferenceServerException

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.server.cuda_pool import serve_pool_args
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving.gpu.environment import manifest_problems
from tests.fixtures.image_corpus import bad_images, zoo
from tests.integration.helpers import infer, scene_bytes

RESULTS = "docs/results/gpu/2026-12-01-h200-proof.json"
MISSING = manifest_problems({"preprocess": {"device": "gpu"}})
pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    bool(MISSING), reason=f"needs a CUDA GPU with the gpu extra ({MISSING[:1]}); the H200 run is in {RESULTS}")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("gpu_preprocess")
    build_repository(DEMO_ONNX, root / "cpu", BuildOptions(name="yolo_cpu"))
    build_repository(DEMO_ONNX, root / "gpu", BuildOptions(name="yolo_gpu", preprocess_device="gpu"))
    with EmbeddedServer(root / "cpu", free_port(), free_port(), free_port(), log_file=root / "log",
                        extra_args=(f"--model-repository={root / 'gpu'}", *serve_pool_args([root / "gpu"]))) as running:
        yield running


def test_every_format_gives_the_cpu_path_detections(server: EmbeddedServer) -> None:
    images = [*zoo().values(), *(scene_bytes(seed, 1280, 720) for seed in range(4))]
    for image in images:
        cpu, gpu = infer(server, "yolo_cpu", [image]), infer(server, "yolo_gpu", [image])
        assert abs(int(cpu["num_detections"][0, 0]) - int(gpu["num_detections"][0, 0])) <= 1


def test_bad_images_fail_alone_with_the_cpu_path_message(server: EmbeddedServer) -> None:
    for data in bad_images().values():
        messages = []
        for model in ("yolo_cpu", "yolo_gpu"):
            with pytest.raises(InferenceServerException) as caught:
                infer(server, model, [data])
            messages.append(str(caught.value).replace(model, "MODEL"))
        assert messages[0] == messages[1]
        assert infer(server, "yolo_gpu", [scene_bytes(7, 640, 480)])["num_detections"][0, 0] >= 0
