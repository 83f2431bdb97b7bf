"""NMS inside the served graph: ONNX Runtime on the graph == the Python nms step on the same head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import NMS_IN_GRAPH_MAX_DETECTIONS, BuildOptions
from generator.builder.stages.graph.nms import NMS_OUTPUT, GraphNmsError, NmsSettings, add_nms
from generator.builder.stages.graph.suffix import add_class_reduction
from generator.demo import DEMO_ONNX, INPUT_SIZE
from generator.serving.batch import prepare_batch
from generator.serving.contract import GRAPH_NMS_LAYOUT
from generator.serving.letterbox import Letterbox
from generator.serving.nms import postprocess
from loadtest.images import synthetic_images
from tests.generator.builder.stages.graph.helpers import head_model, run

LETTERBOX = np.array([Letterbox(0.0, 0.0, 1.0, 1.0, 640, 640).as_array()] * 4, dtype=np.float32)


def random_head(rng: np.random.Generator, layout: str, batch: int, classes: int, anchors: int,
                score_levels: int | None = None) -> np.ndarray:
    """Crowded boxes (much overlap, so NMS has work) with continuous scores, or ``score_levels`` distinct ones."""
    xywh = np.concatenate([rng.uniform(0, 200, (batch, anchors, 2)), rng.uniform(5, 80, (batch, anchors, 2))], -1)
    scores = rng.uniform(0, 1, (batch, anchors, classes))
    if score_levels:
        scores = np.round(scores * score_levels) / score_levels
    if layout == "v5":
        objectness = rng.uniform(0.2, 1, (batch, anchors, 1))
        return np.concatenate([xywh, objectness, scores], -1).astype(np.float32)
    return np.concatenate([xywh, scores], -1).transpose(0, 2, 1).astype(np.float32)


def graph_rows(raw: np.ndarray, layout: str, settings: NmsSettings, anchors: int | str) -> np.ndarray:
    _, dim1, dim2 = raw.shape
    shape: tuple[int | str, ...] = ("batch", dim1, anchors) if layout.startswith("v8") else ("batch", anchors, dim2)
    model = add_nms(head_model(17, shape=shape), layout, settings)
    return run(model, {"head": raw})


def assert_same(raw: np.ndarray, layout: str, settings: NmsSettings, anchors: int | str) -> np.ndarray:
    rows = graph_rows(raw, layout, settings, anchors)
    assert rows.shape == (len(raw), settings.max_detections, 6) and rows.dtype == np.float32
    args = (LETTERBOX[: len(raw)], settings.conf_threshold, settings.iou_threshold, settings.max_detections)
    want = postprocess(raw, layout, *args)
    got = postprocess(rows, GRAPH_NMS_LAYOUT, *args)
    np.testing.assert_array_equal(got.num_detections, want.num_detections)
    np.testing.assert_array_equal(got.classes, want.classes)
    np.testing.assert_array_equal(got.scores, want.scores)
    np.testing.assert_array_equal(got.boxes, want.boxes)
    return rows


@pytest.mark.parametrize("layout", ["v8", "v5"])
@pytest.mark.parametrize("anchors", [300, "anchors"])  # static, and symbolic (K from the shape, then padded)
@pytest.mark.parametrize(("conf", "iou", "max_det"), [(0.25, 0.45, 100), (0.5, 0.7, 7), (0.0, 0.3, 300)])
def test_graph_nms_equals_the_python_step(layout: str, anchors: int | str, conf: float, iou: float,
                                          max_det: int) -> None:
    raw = random_head(np.random.default_rng(max_det), layout, 3, 5, 300)
    rows = assert_same(raw, layout, NmsSettings(conf, iou, max_det, 5), anchors)
    assert (rows[..., 4] > 0).sum() >= 3 * min(max_det, 7)  # there were detections to compare


def test_tied_scores_keep_the_lower_anchor_like_the_python_step() -> None:
    raw = random_head(np.random.default_rng(3), "v8", 2, 3, 400, score_levels=4)
    assert_same(raw, "v8", NmsSettings(0.2, 0.45, 100, 3), 400)


def test_fewer_anchors_than_max_det_pads_with_zero_rows() -> None:
    raw = random_head(np.random.default_rng(0), "v8", 2, 2, 20)
    rows = assert_same(raw, "v8", NmsSettings(0.1, 0.5, 50, 2), 20)
    count = (rows[..., 4] > 0).sum(axis=1)
    assert rows.shape == (2, 50, 6) and (count <= 20).all()
    for image, n in enumerate(count):
        assert not rows[image, n:].any()
        assert (np.diff(rows[image, :n, 4]) <= 0).all()  # best first


def test_non_finite_and_negative_rows_are_dropped_like_the_python_step() -> None:
    raw = random_head(np.random.default_rng(1), "v8", 1, 3, 40)
    raw[0, 4:, 0] = np.nan  # NaN class score: the anchor is no candidate
    raw[0, 0, 1] = np.inf  # infinite box
    raw[0, 2, 2] = np.nan  # NaN box
    raw[0, 4:, 3] = [np.inf, 0.1, 0.1]  # infinite best score
    rows = assert_same(raw, "v8", NmsSettings(0.1, 0.5, 40, 3), 40)
    assert np.isfinite(rows).all()
    reduced = run(add_class_reduction(head_model(17, shape=("batch", 7, 40))), {"head": raw})
    reduced[0, 5, 5] = np.nan  # a NaN class id in a reduced head
    reduced[0, 5, 6] = -1.0
    rows = graph_rows(reduced, "v8_reduced", NmsSettings(0.1, 0.5, 40, 3), 40)
    want = postprocess(reduced, "v8_reduced", LETTERBOX[:1], 0.1, 0.5, 40)
    got = postprocess(rows, GRAPH_NMS_LAYOUT, LETTERBOX[:1], 0.1, 0.5, 40)
    np.testing.assert_array_equal(got.boxes, want.boxes)
    np.testing.assert_array_equal(got.classes, want.classes)


def test_float16_head_is_decoded_in_float32_like_the_python_step() -> None:
    raw = random_head(np.random.default_rng(2), "v8", 2, 4, 200).astype(np.float16)
    model = add_nms(head_model(17, TensorProto.FLOAT16, ("batch", 8, 200)), "v8", NmsSettings(0.3, 0.45, 100, 4))
    rows = run(model, {"head": raw})
    want = postprocess(raw, "v8", LETTERBOX[:2], 0.3, 0.45, 100)
    got = postprocess(rows, GRAPH_NMS_LAYOUT, LETTERBOX[:2], 0.3, 0.45, 100)
    np.testing.assert_array_equal(got.boxes, want.boxes)
    np.testing.assert_array_equal(got.scores, want.scores)


def test_refusals_say_what_to_do() -> None:
    settings = NmsSettings(0.25, 0.45, 100, 2)
    with pytest.raises(GraphNmsError, match="already NMS-free"):
        add_nms(head_model(17, shape=("batch", "anchors", 6)), "end2end", settings)
    with pytest.raises(GraphNmsError, match="opset >= 13"):
        add_nms(head_model(12, shape=("batch", 6, "anchors")), "v8", settings)
    with pytest.raises(GraphNmsError, match=f"1..{NMS_IN_GRAPH_MAX_DETECTIONS}"):
        add_nms(head_model(17, shape=("batch", 6, "anchors")), "v8", NmsSettings(0.25, 0.45, 5000, 2))
    with pytest.raises(GraphNmsError, match="class count"):
        add_nms(head_model(17, shape=("batch", 6, "anchors")), "v8", NmsSettings(0.25, 0.45, 100, 0))


def served(output: Path, source: Path = DEMO_ONNX, **options: object) -> onnx.ModelProto:
    build_repository(source, output, BuildOptions(**options))  # type: ignore[arg-type]
    return onnx.load(str(output / "yolo_detector" / "1" / "model.onnx"))


def test_the_demo_built_with_nms_in_graph_detects_what_the_default_build_does(tmp_path: Path) -> None:
    images = synthetic_images([(640, 480), (1280, 720)], per_size=6, seed=5)
    batch = prepare_batch(images, (INPUT_SIZE, INPUT_SIZE))
    default = served(tmp_path / "default")
    with_nms = served(tmp_path / "nms", nms_in_graph=True)
    assert [o.name for o in with_nms.graph.output] == [NMS_OUTPUT]
    raw = run(default, {default.graph.input[0].name: batch.images})
    rows = run(with_nms, {with_nms.graph.input[0].name: batch.images})
    want = postprocess(raw, "v8_reduced", batch.letterbox, 0.25, 0.45, 100)
    got = postprocess(rows, GRAPH_NMS_LAYOUT, batch.letterbox, 0.25, 0.45, 100)
    assert want.num_detections.sum() > 10
    for name in ("num_detections", "boxes", "scores", "classes"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def assert_equal_detections(got: object, want: object) -> None:
    for name in ("num_detections", "boxes", "scores", "classes"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


@pytest.mark.parametrize("layout", ["v8", "v5"])
def test_eighty_classes_at_batch_32_like_the_python_step(layout: str) -> None:
    # Issue 28's case: a COCO head at a large batch, every image crowded enough to fill max_det.
    raw = random_head(np.random.default_rng(80), layout, 32, 80, 2100)
    rows = graph_rows(raw, layout, NmsSettings(0.25, 0.45, 100, 80), 2100)
    letterbox = np.repeat(LETTERBOX[:1], 32, axis=0)
    want = postprocess(raw, layout, letterbox, 0.25, 0.45, 100)
    assert (want.num_detections == 100).all()
    assert_equal_detections(postprocess(rows, GRAPH_NMS_LAYOUT, letterbox, 0.25, 0.45, 100), want)


def test_a_yolo11_export_at_batch_32_detects_in_the_graph_what_the_python_step_does(tmp_path: Path) -> None:
    from tests.fixtures.ultralytics import write

    onnx_path = write("yolo11-dynamic", tmp_path)  # 80 classes, 320x320, dynamic batch
    images = synthetic_images([(1280, 720)], per_size=32, seed=3)
    batch = prepare_batch(images, (320, 320))
    options = {"conf_threshold": 0.1, "max_batch": 32, "service_ms": 100.0}
    default = served(tmp_path / "default", onnx_path, **options)
    with_nms = served(tmp_path / "nms", onnx_path, nms_in_graph=True, **options)
    raw = run(default, {default.graph.input[0].name: batch.images})
    rows = run(with_nms, {with_nms.graph.input[0].name: batch.images})
    want = postprocess(raw, "v8_reduced", batch.letterbox, 0.1, 0.45, 100)
    assert want.num_detections.sum() > 32 * 10  # crowded: the score bias leaves tens of boxes per scene
    assert_equal_detections(postprocess(rows, GRAPH_NMS_LAYOUT, batch.letterbox, 0.1, 0.45, 100), want)
