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


def test_each_task_draws_what_it_returned():
    image = np.full((160, 200, 3), 128, np.uint8)
    mask = np.zeros((160, 200), dtype=bool)
    mask[100:140, 150:190] = True
    from generator.serving.masks import encode_counts, run_lengths

    result = DetectionResult((
        Detection(box=(20.0, 20.0, 60.0, 60.0), score=0.9, class_id=0, class_name="person",
                  keypoints=((40.0, 40.0, 0.9), (10.0, 150.0, 0.1))),
        Detection(box=(79.0, 27.0, 141.0, 73.0), score=0.8, class_id=1, class_name="ship",
                  rotated_box=(110.0, 50.0, 60.0, 20.0, 0.5)),
        Detection(box=(150.0, 100.0, 190.0, 140.0), score=0.7, class_id=2, class_name="cup",
                  mask_rle=encode_counts(run_lengths(mask)), mask_size=(160, 200)),
    ))
    out = draw_detections(image, result)
    assert (out[40, 40] != 128).any()  # the visible keypoint
    assert (out[150, 10] == 128).all()  # the occluded one is not drawn
    assert (out[72, 140] == 128).all()  # the rotated box is drawn instead of its hull (a corner of which)
    assert (out[63:66, 135:138] != 128).any()  # about the middle of an edge of the turned box
    assert (out[120, 170] != 128).all() and (out[120, 145] == 128).all()  # the mask is tinted in, not beside it


def test_a_classifiers_best_class_labels_the_top_left_corner():
    from clients.detection import Classification

    image = np.full((120, 160, 3), 255, np.uint8)
    canvas = draw_detections(image, DetectionResult((), (Classification(4, "heron", 0.9),)))
    assert (canvas[:8, :20] != 255).any() and (canvas[60:, 80:] == 255).all()  # the label, nothing else
    assert (image == 255).all()
