"""OnnxRunner: static-batch exports run any number of images (chunk + pad) like a dynamic one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from generator.serving.runner import OnnxRunner
from tests.fixtures.onnx_factory import make_detector, save


@pytest.fixture(scope="module")
def dynamic_runner(tmp_path_factory: pytest.TempPathFactory) -> OnnxRunner:
    path = save(make_detector("v8", batch="batch", seed=5), tmp_path_factory.mktemp("runner") / "dyn.onnx")
    return OnnxRunner(str(path), intra_op_threads=1)


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (7, 3, 64, 64)).astype(np.float32)


def test_dynamic_model_reports_no_static_batch(dynamic_runner: OnnxRunner) -> None:
    assert dynamic_runner.static_batch is None
    assert dynamic_runner.input_name == "images" and dynamic_runner.output_names == ["output0"]


@pytest.mark.parametrize("static", [1, 3])
def test_static_batch_model_equals_per_image_runs(tmp_path: Path, dynamic_runner: OnnxRunner, images: np.ndarray,
                                                  static: int) -> None:
    # Same seed, same weights: only the batch axis differs from the dynamic twin.
    runner = OnnxRunner(str(save(make_detector("v8", batch=static, seed=5), tmp_path / "static.onnx")),
                        intra_op_threads=1)
    assert runner.static_batch == static
    per_image = np.concatenate([dynamic_runner.run(images[i : i + 1])[0] for i in range(len(images))])
    for count in range(1, len(images) + 1):
        (out,) = runner.run(images[:count])
        assert out.shape == (count, 6, 64)
        np.testing.assert_allclose(out, per_image[:count], rtol=1e-5, atol=1e-5)


def test_images_are_not_mixed_up_between_chunks(tmp_path: Path, images: np.ndarray) -> None:
    runner = OnnxRunner(str(save(make_detector("v8", batch=3, seed=5), tmp_path / "static.onnx")),
                        intra_op_threads=1)
    (forward,) = runner.run(images)
    (backward,) = runner.run(images[::-1].copy())
    np.testing.assert_allclose(forward, backward[::-1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(forward[0], forward[1])


def test_session_threads_share_the_host_between_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from generator.serving.runner import session_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)), raising=False)
    assert session_threads(0, 2) == 8  # 16 cores, two detector instances
    assert session_threads(0, 3) == 5
    assert session_threads(0, 64) == 1  # never zero: ONNX Runtime would read 0 as "every core"
    assert session_threads(4, 2) == 4  # an explicit --detector-threads wins
