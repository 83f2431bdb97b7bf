"""Real Ultralytics exports of the heads the ensemble cannot serve are refused at inspection, by name.

The exports are yolo11n's pose, segmentation, OBB and classification models from the packaged YAMLs
(``tests/fixtures/ultralytics``); the detection families themselves are the family matrix
(``tests/integration/test_family_matrix.py``).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from generator.errors import ModelInspectionError
from generator.model.onnx_inspect import inspect_onnx
from tests.fixtures import ultralytics as fixtures

HEADS = {
    "pose": "a pose head .*task 'pose', head 'Pose'",
    "seg": "a segmentation head .*task 'segment', head 'Segment'",
    "obb": "an oriented-box head .*task 'obb', head 'OBB'",
    "classify": "a classification head .*task 'classify', head 'Classify'",
}


@pytest.mark.parametrize("head", fixtures.REFUSED_HEADS)
def test_other_heads_are_refused_naming_the_head_and_what_is_served(head: str, tmp_path: Path) -> None:
    path = fixtures.write(f"{head}-static", tmp_path)
    with pytest.raises(ModelInspectionError, match=HEADS[head]) as caught:
        inspect_onnx(path)
    assert "the ensemble serves detection heads" in str(caught.value)
    assert "[N, K, 6] (NMS-free YOLOv10, YOLO26)" in str(caught.value)


@pytest.mark.parametrize("head", ["seg", "classify"])
def test_heads_are_recognised_without_the_ultralytics_metadata(head: str, tmp_path: Path) -> None:
    """A graph whose metadata was stripped (onnxsim, a converter) still names its head from its outputs."""
    model = fixtures.load(f"{head}-static")
    del model.metadata_props[:]
    path = tmp_path / "stripped.onnx"
    onnx.save(model, str(path))
    expected = {"seg": "two outputs .* a segmentation head", "classify": "a classification head"}[head]
    with pytest.raises(ModelInspectionError, match=expected):
        inspect_onnx(path)


@pytest.mark.parametrize("family", fixtures.FAMILIES)
def test_every_detection_family_is_recognised(family: str, tmp_path: Path) -> None:
    for mode in fixtures.BATCH_MODES:
        info = inspect_onnx(fixtures.write(f"{family}-{mode}", tmp_path))
        expected = "end2end" if family in ("yolov10", "yolo26") else "v8"
        assert (info.layout, info.num_classes, info.image_size) == (expected, 80, (320, 320))
        assert info.static_batch == (1 if mode == "static" else None)
