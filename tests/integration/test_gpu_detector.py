"""--target embedded --device gpu on the embedded Triton: the detector on ONNX Runtime's CUDA provider.

Where ONNX Runtime has no CUDA provider (CI, this project's machines) the repository must not load, with the
reason in the server log. The serving tests need a CUDA GPU with onnxruntime-gpu (and the gpu extra for the GPU
preprocess); they skip elsewhere. tools/gpu/detector_proof.py ran the same comparisons and more on the lent H200:
docs/results/gpu/2026-12-02-h200-detector-proof.json, commands in docs/results/gpu/README.md ("GPU detector").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.demo import DEMO_ONNX
from generator.errors import ServerError
from generator.evaluation.reference import ReferencePipeline
from generator.server.cuda_pool import serve_pool_args
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving.gpu.environment import detector_problems, manifest_problems
from tests.fixtures.image_corpus import bad_images
from tests.integration.helpers import infer, scene_bytes

RESULTS = "docs/results/gpu/2026-12-02-h200-detector-proof.json"
NO_CUDA = detector_problems({"detector": {"requirements": ["onnxruntime-gpu"]}})
GPU_PREPROCESS_MISSING = manifest_problems({"preprocess": {"device": "gpu"}})
pytestmark = pytest.mark.integration


@pytest.mark.skipif(not NO_CUDA, reason="ONNX Runtime here has a working CUDA provider: the tests below serve it")
def test_without_a_gpu_the_repository_does_not_load_and_check_said_why(tmp_path: Path) -> None:
    """Triton itself refuses KIND_GPU instances on a machine without a GPU; on a GPU host without onnxruntime-gpu
    the detector's own CudaProviderError refuses instead (tests/generator/serving/test_runner.py)."""
    from generator.cli import main

    build_repository(DEMO_ONNX, tmp_path / "repo", BuildOptions(device="gpu"))
    assert main(["check", str(tmp_path / "repo")]) == 1  # the GPU detector's mismatch, before serving
    log = tmp_path / "server.log"
    server = EmbeddedServer(tmp_path / "repo", free_port(), free_port(), free_port(), log_file=log)
    with pytest.raises(ServerError, match="exited before it was ready"), server:
        pass
    assert "yolo_detector has kind KIND_GPU but no GPUs are available" in log.read_text()


gpu_only = pytest.mark.skipif(bool(NO_CUDA), reason=f"needs a CUDA GPU with onnxruntime-gpu ({NO_CUDA[:1]}); the "
                              f"H200 run is in {RESULTS}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("gpu_detector")
    build_repository(DEMO_ONNX, root / "cpu_pre", BuildOptions(name="gpu_det", device="gpu"))
    extra: tuple[str, ...] = ()
    if not GPU_PREPROCESS_MISSING:
        build_repository(DEMO_ONNX, root / "gpu_pre", BuildOptions(name="gpu_all", device="gpu",
                                                                   preprocess_device="gpu"))
        # Triton's CUDA memory pool as generator serve sizes it for a GPU preprocess (cuda_pool.py)
        extra = (f"--model-repository={root / 'gpu_pre'}", *serve_pool_args([root / "gpu_pre"]))
    with EmbeddedServer(root / "cpu_pre", free_port(), free_port(), free_port(), log_file=root / "log",
                        extra_args=extra) as running:
        yield running


def scenes() -> list[bytes]:
    return [scene_bytes(seed, *size) for seed, size in enumerate([(640, 480), (1280, 720), (480, 640)] * 2)]


@gpu_only
def test_gpu_detections_are_the_cpu_references(server: EmbeddedServer) -> None:
    reference = ReferencePipeline(DEMO_ONNX)
    for image in scenes():
        expected = reference.detect(image)
        served = infer(server, "gpu_det", [image])
        count = int(served["num_detections"][0, 0])
        assert count == len(expected.scores)
        np.testing.assert_allclose(served["detection_boxes"][0, :count], expected.boxes, atol=1.0)
        np.testing.assert_allclose(served["detection_scores"][0, :count], expected.scores, atol=0.02)


@gpu_only
@pytest.mark.skipif(bool(GPU_PREPROCESS_MISSING), reason=f"needs the gpu extra ({GPU_PREPROCESS_MISSING[:1]}); the "
                    f"H200 run is in {RESULTS}")
def test_gpu_preprocess_hands_the_gpu_detector_its_batch(server: EmbeddedServer) -> None:
    batch = scenes()[:4]
    cpu, gpu = infer(server, "gpu_det", batch), infer(server, "gpu_all", batch)
    for i in range(len(batch)):  # the GPU decode differs from libjpeg by a grey level here and there
        assert abs(int(cpu["num_detections"][i, 0]) - int(gpu["num_detections"][i, 0])) <= 1


@gpu_only
def test_bad_images_fail_alone(server: EmbeddedServer) -> None:
    for data in bad_images().values():
        with pytest.raises(InferenceServerException, match="invalid image"):
            infer(server, "gpu_det", [data])
        assert infer(server, "gpu_det", [scenes()[0]])["num_detections"][0, 0] >= 0
