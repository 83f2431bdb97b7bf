"""Shared fixtures: the toy detector and calibration batches through the production letterbox."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from generator.serving.batch import to_float_nchw
from generator.serving.letterbox import letterbox
from generator.synthetic import make_scene
from tests.generator.builder.stages.precision.toy_detector import INPUT_HW, build_toy_detector


@pytest.fixture(scope="module")
def toy_model() -> onnx.ModelProto:
    return build_toy_detector()


@pytest.fixture(scope="module")
def scene_batches() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    # The serving path: letterbox the BGR image, then RGB NCHW / 255 (what the normalisation prefix does).
    images = [letterbox(make_scene(rng, 96, 64).image[..., ::-1], INPUT_HW)[0] for _ in range(12)]
    return [to_float_nchw(image[None]) for image in images]
