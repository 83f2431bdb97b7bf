"""tools/gpu/handoff_check.py: what counts as another image's detections."""

from __future__ import annotations

from clients.detection import Detection, DetectionResult
from tools.gpu.handoff_check import another_image, same


def _result(*boxes: tuple[float, float, float, float, int]) -> DetectionResult:
    return DetectionResult(tuple(Detection((x1, y1, x2, y2), 0.9, c, str(c)) for x1, y1, x2, y2, c in boxes))


def test_the_same_detections_within_a_pixel_match() -> None:
    reference = _result((10, 20, 110, 220, 3), (5, 5, 50, 50, 0))
    assert same(_result((10.4, 20, 110, 219.2, 3), (5, 5, 50, 50.9, 0)), reference, 1.0)
    assert same(_result(), _result(), 1.0)


def test_another_count_class_or_box_is_a_mismatch() -> None:
    reference = _result((10, 20, 110, 220, 3))
    assert not same(_result(), reference, 1.0)
    assert not same(_result((10, 20, 110, 220, 4)), reference, 1.0)
    assert not same(_result((10, 20, 112, 220, 3)), reference, 1.0)


def test_another_image_is_another_non_empty_reference_exactly() -> None:
    references = [_result((10, 20, 110, 220, 3)), _result(), _result((300, 300, 400, 400, 1))]
    assert another_image(_result((300, 300, 400, 400.5, 1)), references, 0, 1.0)
    assert not another_image(_result((10, 20, 110, 220, 3)), references, 0, 1.0)  # its own
    assert not another_image(_result((50, 50, 60, 60, 2)), references, 1, 1.0)  # nobody's
    # an empty answer equals the image without detections, yet says nothing about a hand-off
    assert not another_image(_result(), references, 0, 1.0)
