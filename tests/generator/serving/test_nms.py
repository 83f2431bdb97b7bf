"""Vectorised NMS and postprocess against a brute-force pure-Python greedy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from generator.serving import nms as nms_module
from generator.serving.letterbox import Letterbox, letterbox
from generator.serving.nms import Detections, boxes_and_best_scores, decode_head, nms, postprocess
from tests.generator.serving.helpers import assert_same_detections, reduce_v8


def iou(a: list[float], b: list[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = max(a[2] - a[0], 0) * max(a[3] - a[1], 0) + max(b[2] - b[0], 0) * max(b[3] - b[1], 0) - inter
    return inter / max(union, 1e-9)


def reference_candidates(raw: np.ndarray, layout: str, image: int) -> list[tuple[float, int, list[float], int]]:
    """(score, class, xyxy, anchor) of every row of one image, decoded one row at a time."""
    rows = raw[image].T if layout == "v8" else raw[image]
    out = []
    for anchor, row in enumerate(rows.astype(np.float64).tolist()):
        if layout == "end2end":
            box, score, cls = row[:4], row[4], int(row[5])
        else:
            cx, cy, w, h = row[:4]
            box = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
            if layout == "v8":
                class_scores = [float(np.float32(s)) for s in row[4:]]
            else:
                class_scores = [float(np.float32(np.float32(s) * np.float32(row[4]))) for s in row[5:]]
            score = max(class_scores)
            cls = class_scores.index(score)
        out.append((score, cls, box, anchor))
    return out


def reference_postprocess(raw: np.ndarray, layout: str, params: np.ndarray, conf: float, iou_threshold: float,
                          max_det: int, max_candidates: int = nms_module.MAX_CANDIDATES,
                          ) -> list[list[tuple[list[float], float, int]]]:
    """Per image: filter, sort by score, keep the best candidates, greedy per-class suppression, cap,
    map to source pixels."""
    result = []
    for image in range(raw.shape[0]):
        cands = [c for c in reference_candidates(raw, layout, image)
                 if all(math.isfinite(v) for v in (c[0], *c[2])) and c[0] > conf]
        cands.sort(key=lambda c: (-c[0], c[3]))
        cands = cands[:max_candidates]
        kept: list[tuple[float, int, list[float], int]] = []
        for cand in cands:
            if layout == "end2end" or all(k[1] != cand[1] or iou(k[2], cand[2]) <= iou_threshold for k in kept):
                kept.append(cand)
        pad_x, pad_y, gain_x, gain_y, width, height = params[image].tolist()
        mapped = []
        for score, cls, (x1, y1, x2, y2), _ in kept[:max_det]:
            box = [min(max((x1 - pad_x) / gain_x, 0), width), min(max((y1 - pad_y) / gain_y, 0), height),
                   min(max((x2 - pad_x) / gain_x, 0), width), min(max((y2 - pad_y) / gain_y, 0), height)]
            mapped.append((box, score, cls))
        result.append(mapped)
    return result


def assert_same(got: Detections, expected: list[list[tuple[list[float], float, int]]], max_det: int) -> None:
    batch = len(expected)
    assert got.num_detections.shape == (batch, 1) and got.num_detections.dtype == np.int32
    assert got.boxes.shape == (batch, max_det, 4) and got.boxes.dtype == np.float32
    assert got.scores.shape == (batch, max_det) and got.scores.dtype == np.float32
    assert got.classes.shape == (batch, max_det) and got.classes.dtype == np.int32
    for image, dets in enumerate(expected):
        n = len(dets)
        assert got.num_detections[image, 0] == n
        if n:
            np.testing.assert_allclose(got.scores[image, :n], [d[1] for d in dets], rtol=1e-6)
            np.testing.assert_array_equal(got.classes[image, :n], [d[2] for d in dets])
            np.testing.assert_allclose(got.boxes[image, :n], [d[0] for d in dets], rtol=1e-5, atol=1e-3)
        assert not got.boxes[image, n:].any() and not got.scores[image, n:].any()
        assert not got.classes[image, n:].any()


def random_params(rng: np.random.Generator, batch: int, target: tuple[int, int] = (640, 640)) -> np.ndarray:
    sizes = rng.integers(50, 2000, (batch, 2))
    return np.stack([letterbox(np.zeros((h, w, 3), np.uint8), target)[1].as_array() for h, w in sizes])


def random_head(rng: np.random.Generator, layout: str, batch: int, anchors: int, nc: int) -> np.ndarray:
    """Boxes in a few clusters so suppression actually happens; scores spread around the threshold."""
    centers = rng.uniform(50, 590, (batch, 6, 2))
    pick = rng.integers(0, 6, (batch, anchors))
    xy = np.take_along_axis(centers, pick[..., None], axis=1) + rng.normal(0, 12, (batch, anchors, 2))
    wh = rng.uniform(20, 120, (batch, anchors, 2))
    if layout == "v8":
        scores = rng.uniform(0, 1, (batch, anchors, nc)) ** 2
        return np.concatenate([xy, wh, scores], axis=-1).transpose(0, 2, 1).astype(np.float32)
    if layout == "v5":
        obj = rng.uniform(0, 1, (batch, anchors, 1))
        scores = rng.uniform(0, 1, (batch, anchors, nc))
        return np.concatenate([xy, wh, obj, scores], axis=-1).astype(np.float32)
    xyxy = np.concatenate([xy - wh / 2, xy + wh / 2], axis=-1)
    score = rng.uniform(0, 1, (batch, anchors, 1))
    cls = rng.integers(0, nc, (batch, anchors, 1))
    return np.concatenate([xyxy, score, cls], axis=-1).astype(np.float32)


@pytest.mark.parametrize("layout", ["v8", "v5", "end2end"])
@pytest.mark.parametrize("seed", range(12))
def test_postprocess_matches_brute_force_reference(layout: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch, anchors, nc = int(rng.integers(1, 5)), int(rng.integers(1, 300)), int(rng.integers(1, 5))
    conf, iou_threshold, max_det = float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.2, 0.8)), int(rng.integers(1, 60))
    raw = random_head(rng, layout, batch, anchors, nc)
    params = random_params(rng, batch)
    got = postprocess(raw, layout, params, conf, iou_threshold, max_det)
    assert_same(got, reference_postprocess(raw, layout, params, conf, iou_threshold, max_det), max_det)


@pytest.mark.parametrize("layout", ["v8", "v5", "end2end"])
@pytest.mark.parametrize("seed", range(4))
def test_candidate_cap_is_per_image_and_keeps_the_best(layout: str, seed: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nms_module, "MAX_CANDIDATES", 25)
    rng = np.random.default_rng(50 + seed)
    raw = random_head(rng, layout, 3, 200, 2)
    if layout == "v8":
        raw[2, 4:, 5:] = 0  # a quiet image next to busy ones
    else:
        raw[2, 5:, 4:] = 0
    params = random_params(rng, 3)
    got = postprocess(raw, layout, params, 0.1, 0.5, 30)
    assert_same(got, reference_postprocess(raw, layout, params, 0.1, 0.5, 30, max_candidates=25), 30)


@pytest.mark.parametrize("seed", range(20))
def test_nms_matches_greedy_reference_order_included(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(0, 400))
    xy = rng.uniform(-50, 300, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 80, (n, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    groups = rng.integers(0, 7, n)
    threshold = float(rng.uniform(0.1, 0.9))
    got = nms(boxes, scores, groups, threshold).tolist()
    expected: list[int] = []
    for i in sorted(range(n), key=lambda i: (-scores[i], i)):
        if all(groups[k] != groups[i] or iou(boxes[k].tolist(), boxes[i].tolist()) <= threshold for k in expected):
            expected.append(i)
    assert got == expected


def test_overlapping_boxes_of_different_classes_are_both_kept() -> None:
    # Two identical boxes, class 0 and class 1, plus a same-class duplicate that must go.
    raw = np.zeros((1, 4 + 2, 3), dtype=np.float32)
    raw[0, :4, :] = np.array([[100, 100, 50, 50]] * 3, dtype=np.float32).T
    raw[0, 4, 0], raw[0, 5, 1], raw[0, 4, 2] = 0.9, 0.8, 0.7
    params = Letterbox(0, 0, 1, 1, 640, 640).as_array()[None]
    out = postprocess(raw, "v8", params, 0.25, 0.45, 10)
    assert out.num_detections[0, 0] == 2
    np.testing.assert_array_equal(out.classes[0, :2], [0, 1])
    np.testing.assert_allclose(out.scores[0, :2], [0.9, 0.8])


def test_non_finite_rows_are_dropped() -> None:
    raw = np.zeros((1, 5, 6), dtype=np.float32)
    raw[0, :4, :] = np.array([[10 + 100 * i, 10, 20, 20] for i in range(6)], dtype=np.float32).T
    raw[0, 4, :] = 0.9
    raw[0, 0, 0] = np.nan
    raw[0, 2, 1] = np.inf
    raw[0, 4, 2] = np.nan
    raw[0, 4, 3] = np.inf
    raw[0, 3, 4] = -np.inf
    params = Letterbox(0, 0, 1, 1, 1000, 1000).as_array()[None]
    out = postprocess(raw, "v8", params, 0.25, 0.45, 10)
    assert out.num_detections[0, 0] == 1
    np.testing.assert_allclose(out.boxes[0, 0], [500, 0, 520, 20])
    assert np.isfinite(out.boxes).all() and np.isfinite(out.scores).all()


def test_detections_are_capped_at_max_detections_by_score() -> None:
    anchors = 50
    raw = np.zeros((2, 5, anchors), dtype=np.float32)
    raw[:, 0, :] = np.arange(anchors) * 30 + 15  # disjoint boxes
    raw[:, 1, :], raw[:, 2, :], raw[:, 3, :] = 15, 10, 10
    raw[0, 4, :] = np.linspace(0.3, 0.99, anchors)
    raw[1, 4, :3] = 0.5
    params = np.stack([Letterbox(0, 0, 1, 1, 4000, 100).as_array()] * 2)
    out = postprocess(raw, "v8", params, 0.25, 0.45, 7)
    assert out.num_detections[:, 0].tolist() == [7, 3]
    np.testing.assert_allclose(out.scores[0], np.linspace(0.3, 0.99, anchors)[::-1][:7], rtol=1e-6)


@pytest.mark.parametrize("layout", ["v8", "v5", "end2end"])
def test_zero_detections_still_emit_every_output(layout: str) -> None:
    raw = np.zeros((3, 6, 64) if layout == "v8" else (3, 64, 7 if layout == "v5" else 6), dtype=np.float32)
    params = np.stack([Letterbox(0, 0, 1, 1, 64, 64).as_array()] * 3)
    out = postprocess(raw, layout, params, 0.25, 0.45, 5)
    assert out.num_detections.shape == (3, 1) and not out.num_detections.any()
    assert out.boxes.shape == (3, 5, 4) and out.scores.shape == (3, 5) and out.classes.shape == (3, 5)
    assert out.boxes.dtype == np.float32 and out.classes.dtype == np.int32
    assert not out.boxes.any()


def test_empty_batch() -> None:
    out = postprocess(np.zeros((0, 6, 64), np.float32), "v8", np.zeros((0, 6), np.float32), 0.25, 0.45, 5)
    assert out.num_detections.shape == (0, 1) and out.boxes.shape == (0, 5, 4)


def test_v5_score_is_objectness_times_class() -> None:
    raw = np.zeros((1, 2, 5 + 3), dtype=np.float32)
    raw[0, :, :4] = [[100, 100, 40, 40], [300, 300, 40, 40]]
    raw[0, 0, 4:] = [0.5, 0.9, 0.6, 0.1]  # 0.45 for class 0
    raw[0, 1, 4:] = [0.4, 0.1, 0.2, 0.7]  # 0.28 for class 2; but objectness alone would pass 0.3
    out = postprocess(raw, "v5", Letterbox(0, 0, 1, 1, 640, 640).as_array()[None], 0.3, 0.45, 10)
    assert out.num_detections[0, 0] == 1
    assert out.scores[0, 0] == pytest.approx(0.45) and out.classes[0, 0] == 0


def test_end2end_is_not_suppressed_again_and_is_sorted_by_score() -> None:
    raw = np.zeros((1, 4, 6), dtype=np.float32)
    raw[0, :, :4] = [10, 10, 50, 50]  # identical boxes: NMS would keep one
    raw[0, :, 4] = [0.3, 0.9, 0.1, 0.6]
    raw[0, :, 5] = [2, 0, 1, 2]
    out = postprocess(raw, "end2end", Letterbox(0, 0, 1, 1, 640, 640).as_array()[None], 0.25, 0.45, 10)
    assert out.num_detections[0, 0] == 3
    np.testing.assert_allclose(out.scores[0, :3], [0.9, 0.6, 0.3])
    np.testing.assert_array_equal(out.classes[0, :3], [0, 2, 2])


def test_boxes_come_back_in_source_pixels() -> None:
    # A 1280x720 source letterboxed to 640x640: gain 0.5, pad_y 140.
    _, params = letterbox(np.zeros((720, 1280, 3), np.uint8), (640, 640))
    assert params.pad_y == 140
    raw = np.zeros((1, 5, 1), dtype=np.float32)
    raw[0, :, 0] = [320, 320, 100, 50, 0.9]  # input xyxy 270,295,370,345
    out = postprocess(raw, "v8", params.as_array()[None], 0.25, 0.45, 3)
    np.testing.assert_allclose(out.boxes[0, 0], [540, 310, 740, 410], atol=1e-3)


def test_float16_head_is_accepted() -> None:
    rng = np.random.default_rng(3)
    raw = random_head(rng, "v8", 2, 100, 3)
    params = random_params(rng, 2)
    half = raw.astype(np.float16)
    got = postprocess(half, "v8", params, 0.25, 0.45, 20)
    assert_same(got, reference_postprocess(half.astype(np.float32), "v8", params, 0.25, 0.45, 20), 20)


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown head layout 'v9'"):
        decode_head(np.zeros((1, 6, 4), np.float32), "v9", 0.25)


def test_a_busy_image_does_not_starve_its_batch_neighbours() -> None:
    # More candidates than the per-image cap in image 0 must not push image 1's weaker boxes out:
    # each image's result is the same alone or batched.
    anchors = nms_module.MAX_CANDIDATES * 2 + 100
    raw = np.zeros((2, 5, anchors), dtype=np.float32)
    raw[0, 0, :] = np.arange(anchors) % 100 * 10.0 + 5
    raw[0, 1, :] = np.arange(anchors) // 100 * 10.0 + 5
    raw[0, 2:4, :] = 4.0
    raw[0, 4, :] = 0.9
    raw[1, 0, :10] = np.arange(10) * 20.0 + 10
    raw[1, 1:4, :10] = [[10.0], [4.0], [4.0]]
    raw[1, 4, :10] = 0.5
    params = np.stack([Letterbox(0, 0, 1, 1, 5000, 5000).as_array()] * 2)
    batched = postprocess(raw, "v8", params, 0.25, 0.45, 20)
    for image in range(2):
        alone = postprocess(raw[image : image + 1], "v8", params[image : image + 1], 0.25, 0.45, 20)
        assert batched.num_detections[image, 0] == alone.num_detections[0, 0] > 0
        np.testing.assert_array_equal(batched.boxes[image], alone.boxes[0])
        np.testing.assert_array_equal(batched.scores[image], alone.scores[0])


def test_an_absurd_box_does_not_disable_suppression_for_the_batch() -> None:
    raw = np.zeros((2, 5, 3), dtype=np.float32)
    raw[0, :, 0] = [1e20, 1e20, 10, 10, 0.9]  # a broken head in image 0
    raw[1, :, 0] = [100, 100, 50, 50, 0.9]
    raw[1, :, 1] = [102, 100, 50, 50, 0.8]  # IoU 0.92 with the first: suppressed
    params = np.tile(Letterbox(0, 0, 1, 1, 640, 640).as_array(), (2, 1))
    batched = postprocess(raw, "v8", params, 0.25, 0.45, 10)
    assert batched.num_detections[:, 0].tolist() == [1, 1]
    alone = postprocess(raw[1:], "v8", params[1:], 0.25, 0.45, 10)
    np.testing.assert_array_equal(batched.boxes[1], alone.boxes[0])


# --- v8_reduced: the v8 head after the served graph's class max/arg-max (generator.builder.stages.graph.suffix) ------


@pytest.mark.parametrize("seed", range(12))
def test_reduced_head_gives_exactly_the_v8_detections(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    batch, anchors, nc = int(rng.integers(1, 5)), int(rng.integers(1, 400)), int(rng.integers(1, 12))
    raw = random_head(rng, "v8", batch, anchors, nc)
    # Quantised scores: many anchors have two classes tied at their best score.
    raw[:, 4:, :] = np.round(raw[:, 4:, :] * 8) / 8
    params = random_params(rng, batch)
    conf, iou_threshold, max_det = float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.2, 0.8)), int(rng.integers(1, 60))
    expected = postprocess(raw, "v8", params, conf, iou_threshold, max_det)
    assert_same_detections(postprocess(reduce_v8(raw), "v8_reduced", params, conf, iou_threshold, max_det), expected)


def test_reduced_head_with_non_finite_values_and_ties() -> None:
    raw = np.zeros((1, 4 + 3, 8), dtype=np.float32)
    raw[0, :4, :] = np.array([[10 + 100 * i, 10, 20, 20] for i in range(8)], dtype=np.float32).T
    raw[0, 4:, :] = 0.1
    raw[0, 4:, 0] = [0.5, 0.9, 0.9]  # tie: class 1, the first of the best
    raw[0, 4:, 1] = [0.9, np.nan, 0.2]  # one NaN class score: the v8 decode drops the anchor
    raw[0, 4:, 2] = np.nan
    raw[0, 4:, 3] = [0.3, np.inf, 0.2]
    raw[0, 4:, 4] = [-np.inf, 0.8, 0.2]  # -inf is just a low score
    raw[0, 0, 5], raw[0, 4, 5] = np.nan, 0.9  # NaN box
    raw[0, 2, 6], raw[0, 6, 6] = np.inf, 0.9  # infinite box
    raw[0, 4:, 7] = [0.7, 0.7, 0.7]  # three-way tie: class 0
    params = Letterbox(0, 0, 1, 1, 1000, 1000).as_array()[None]
    expected = postprocess(raw, "v8", params, 0.25, 0.45, 10)
    got = postprocess(reduce_v8(raw), "v8_reduced", params, 0.25, 0.45, 10)
    assert_same_detections(got, expected)
    assert got.num_detections[0, 0] == 3
    np.testing.assert_array_equal(got.classes[0, :3], [1, 1, 0])


def test_reduced_head_drops_a_nan_class_id() -> None:
    raw = np.zeros((1, 6, 2), dtype=np.float32)
    raw[0, :, 0] = [100, 100, 20, 20, 0.9, np.nan]
    raw[0, :, 1] = [300, 100, 20, 20, 0.8, 3]
    out = postprocess(raw, "v8_reduced", Letterbox(0, 0, 1, 1, 640, 640).as_array()[None], 0.25, 0.45, 10)
    assert out.num_detections[0, 0] == 1 and out.classes[0, 0] == 3


def test_reduced_head_is_not_read_as_a_two_class_head() -> None:
    # Same [N, 6, A] array, two readings: the layout decides, not the shape.
    raw = np.zeros((1, 6, 1), dtype=np.float32)
    raw[0, :, 0] = [100, 100, 20, 20, 0.6, 4]
    params = Letterbox(0, 0, 1, 1, 640, 640).as_array()[None]
    reduced = postprocess(raw, "v8_reduced", params, 0.25, 0.45, 10)
    assert reduced.classes[0, 0] == 4 and reduced.scores[0, 0] == pytest.approx(0.6)
    two_class = postprocess(raw, "v8", params, 0.25, 0.45, 10)
    assert two_class.classes[0, 0] == 1 and two_class.scores[0, 0] == 4


@pytest.mark.parametrize("layout", ["v8", "v5", "end2end"])
def test_boxes_and_best_scores_agree_with_the_decode(layout: str) -> None:
    rng = np.random.default_rng(7)
    raw = random_head(rng, layout, 2, 50, 3)
    boxes, best = boxes_and_best_scores(raw, layout)
    assert boxes.shape == (2, 50, 4) and best.shape == (2, 50)
    found = decode_head(raw, layout, 0.0)
    image, anchor = np.nonzero(best > 0.0)
    np.testing.assert_array_equal(image, found.image)
    np.testing.assert_array_equal(best[image, anchor], found.scores)
    if layout == "end2end":
        np.testing.assert_array_equal(boxes[image, anchor], found.boxes)


def test_boxes_and_best_scores_of_a_reduced_head_equal_the_full_heads() -> None:
    rng = np.random.default_rng(8)
    raw = random_head(rng, "v8", 3, 70, 5)
    raw[1, 6, 3] = np.nan
    full_boxes, full_best = boxes_and_best_scores(raw, "v8")
    reduced_boxes, reduced_best = boxes_and_best_scores(reduce_v8(raw), "v8_reduced")
    np.testing.assert_array_equal(reduced_boxes, full_boxes)
    np.testing.assert_array_equal(reduced_best, full_best)
    assert np.isnan(reduced_best[1, 3])
