"""What a static batch-1 export becomes on the onnxruntime target, checked against a real Triton 2.51 core.

The ONNX Runtime backend is not in the embedded server, but everything the core decides is: a composing
model with ``max_batch_size: 0`` (full dims ``[1, ...]``, queue policy kept through ``dynamic_batching``)
inside a batching ensemble. The embedded Python detector is given exactly the config shape the onnxruntime
target writes, and Triton loads and serves it; with the ensemble left at max_batch_size 8, it still loads
but a two-image request fails, which is why the build gives the ensemble max_batch_size 1.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.builder.stages.config.load_rules import repository_violations
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving import contract
from generator.synthetic import encode, make_scene
from tests.helpers import fix_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def non_batching(repo: Path, name: str, ensemble_batch: int) -> None:
    """Rewrite the embedded detector's config the way the onnxruntime target writes a static batch-1 export."""
    detector = repo / f"{name}_detector" / "config.pbtxt"
    text = detector.read_text().replace("max_batch_size: 8", "max_batch_size: 0")
    # The onnxruntime target prefers no batch size (the embedded one does for a static export: it batches).
    text = re.sub(r"\n  #[^\n]*\n  #[^\n]*\n  preferred_batch_size: \[ 1 \]", "", text)
    text = re.sub(r"dims: \[ (\d+), (\d+), 3 \]", r"dims: [ 1, \1, \2, 3 ]", text, count=1)
    text = re.sub(r"dims: \[ 6, (\d+) \]", r"dims: [ 1, 6, \1 ]", text, count=1)
    detector.write_text(text)
    ensemble = repo / name / "config.pbtxt"
    ensemble.write_text(ensemble.read_text().replace("max_batch_size: 8", f"max_batch_size: {ensemble_batch}"))


def request(images: list[bytes]) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput(contract.IMAGE, [len(images), 1], contract.IMAGE_DATATYPE)
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    return [tensor]


def test_a_non_batching_detector_in_the_ensemble(demo_onnx: Path, tmp_path: Path) -> None:
    static = fix_batch(demo_onnx, tmp_path / "static.onnx", 1)
    one, eight = tmp_path / "one", tmp_path / "eight"
    build_repository(static, one, BuildOptions(name="one", max_batch=8))
    build_repository(static, eight, BuildOptions(name="eight", max_batch=8))
    non_batching(one, "one", 1)
    non_batching(eight, "eight", 8)
    files = {p.relative_to(one).as_posix(): p.read_bytes() for p in one.rglob("*") if p.is_file()}
    assert repository_violations(files, {}) == []  # the rules accept what the build writes ...
    files = {p.relative_to(eight).as_posix(): p.read_bytes() for p in eight.rglob("*") if p.is_file()}
    assert any("the ensemble must have max_batch_size 1" in str(v) for v in repository_violations(files, {}))
    image = encode(make_scene(np.random.default_rng(4), 640, 480).image)
    server = EmbeddedServer(one, free_port(), free_port(), free_port(), log_file=tmp_path / "triton.log",
                            extra_args=(f"--model-repository={eight}",))
    with server, grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_model_ready("one") and client.is_model_ready("eight")  # ... and so does Triton
        served = client.infer("one", request([image])).as_numpy(contract.NUM_DETECTIONS)
        assert served.shape == (1, 1) and served[0, 0] > 0
        assert client.infer("eight", request([image])).as_numpy(contract.NUM_DETECTIONS)[0, 0] == served[0, 0]
        with pytest.raises(InferenceServerException, match="unexpected shape for input"):
            client.infer("eight", request([image, image]))  # what the "ours" ensemble rule prevents
