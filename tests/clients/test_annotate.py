import cv2
import numpy as np
import pytest

from clients.annotate import annotate_image, draw_detections
from clients.detection import Detection, DetectionResult
from clients.errors import ClientError

RESULT = DetectionResult(
    (
        Detection(box=(20.0, 30.0, 120.0, 90.0), score=0.87, class_id=1, class_name="square"),
        Detection(box=(0.0, 0.0, 40.0, 40.0), score=0.40, class_id=4, class_name="star"),
    )
)


def grey_png(h=160, w=200):
    ok, buf = cv2.imencode(".png", np.full((h, w, 3), 128, np.uint8))
    assert ok
    return buf.tobytes()


def test_draw_marks_box_edges_and_keeps_input():
    image = np.full((160, 200, 3), 128, np.uint8)
    out = draw_detections(image, RESULT)
    assert (image == 128).all()  # input untouched
    assert out.shape == image.shape
    assert (out[60, 20] != 128).any()  # left edge of the first box
    assert (out[90, 70] != 128).any()  # bottom edge
    assert (out[60, 70] == 128).all()  # box interior is left alone
    assert (out[150, 190] == 128).all()  # far from every box


def test_draw_nothing_for_empty_result():
    image = np.full((50, 60, 3), 7, np.uint8)
    assert np.array_equal(draw_detections(image, DetectionResult(())), image)


def test_annotate_writes_decodable_file(tmp_path):
    written = annotate_image(grey_png(), RESULT, tmp_path / "sub" / "scene.png")
    assert written == tmp_path / "sub" / "scene.png"
    back = cv2.imread(str(written))
    assert back is not None
    assert back.shape == (160, 200, 3)
    assert (back[60, 20] != 128).any()


def test_annotate_unknown_suffix_becomes_png(tmp_path):
    written = annotate_image(grey_png(), RESULT, tmp_path / "scene.gif")
    assert written.suffix == ".png"
    assert cv2.imread(str(written)) is not None


def test_annotate_rejects_undecodable_bytes(tmp_path):
    with pytest.raises(ClientError, match="cannot decode"):
        annotate_image(b"not an image", RESULT, tmp_path / "x.png")
    with pytest.raises(ClientError, match="cannot decode"):
        annotate_image(b"", RESULT, tmp_path / "x.png")
    assert not list(tmp_path.iterdir())
