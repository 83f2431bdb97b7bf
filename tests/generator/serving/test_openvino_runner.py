"""OpenVinoRunner (--cpu-engine openvino): the same graph as ONNX Runtime, the same outputs, any batch size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from generator.serving.openvino_runner import OpenVinoRunner, compile_settings
from generator.serving.runner import OnnxRunner
from tests.fixtures.onnx_factory import make_detector, save


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, (5, 3, 64, 64)).astype(np.float32)


@pytest.mark.parametrize("batch", ["batch", 1, 2])
def test_outputs_equal_onnx_runtimes_for_every_batch_size(tmp_path: Path, images: np.ndarray,
                                                         batch: str | int) -> None:
    path = str(save(make_detector("v8", batch=batch, seed=7), tmp_path / "det.onnx"))
    reference, engine = OnnxRunner(path, intra_op_threads=1), OpenVinoRunner(path, threads=1)
    assert engine.input_name == reference.input_name and engine.output_names == reference.output_names
    assert engine.static_batch == reference.static_batch and engine.input_type == reference.input_type
    for count in (1, 2, 3, 5):  # static exports: chunks of their size, the last one padded
        expected, got = reference.run(images[:count]), engine.run(images[:count])
        assert [o.shape for o in got] == [o.shape for o in expected]
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)


def test_each_run_returns_its_own_arrays(tmp_path: Path, images: np.ndarray) -> None:
    """The infer request reuses its output memory: a batch's result must survive the next run."""
    engine = OpenVinoRunner(str(save(make_detector("v8", batch="batch", seed=7), tmp_path / "det.onnx")), threads=1)
    first = engine.run(images[:2])[0]
    kept = first.copy()
    engine.run(images[2:4])
    np.testing.assert_array_equal(first, kept)


def test_precision_is_pinned_to_f32_and_threads_are_not_pinned_to_cores() -> None:
    settings = compile_settings(3)
    assert settings["INFERENCE_PRECISION_HINT"] == "f32"  # never bf16/f16 picked by the plugin on AMX CPUs
    assert settings["INFERENCE_NUM_THREADS"] == 3 and settings["ENABLE_CPU_PINNING"] is False


def test_warm_up_runs_the_static_shape(tmp_path: Path) -> None:
    engine = OpenVinoRunner(str(save(make_detector("v8", batch=1, seed=7), tmp_path / "det.onnx")), threads=1)
    assert engine.warm_up() == [1]
