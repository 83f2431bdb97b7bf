"""Shared fixtures: the toy detector and calibration batches through the production letterbox."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from generator.precision.calibration import calibration_batches
from generator.synthetic import make_scene
from tests.generator.precision.toy_detector import INPUT_HW, build_toy_detector


@pytest.fixture(scope="module")
def toy_model() -> onnx.ModelProto:
    return build_toy_detector()


@pytest.fixture(scope="module")
def scene_batches() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    images = [make_scene(rng, 96, 64).image for _ in range(12)]
    return list(calibration_batches(images, INPUT_HW))
