"""Agreement of two versions on mirrored control images."""

from __future__ import annotations

import numpy as np

from generator.operate.rollout.agreement import agreement, matches


def dets(*rows: tuple[float, float, float, float, float, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    array = np.asarray([r[:5] for r in rows], dtype=np.float64).reshape(-1, 5)
    return array[:, :4], array[:, 4], np.asarray([r[5] for r in rows], dtype=np.int64)


def test_same_detections_agree_fully_and_nothing_against_something_not_at_all() -> None:
    image = dets((0, 0, 10, 10, 0.9, 1), (20, 20, 40, 40, 0.8, 2))
    assert agreement([image, dets()], [image, dets()]) == 1.0
    assert agreement([image], [dets()]) == 0.0
    assert agreement([dets()], [dets()]) == 1.0


def test_matches_need_the_same_class_and_enough_overlap_one_to_one() -> None:
    first = dets((0, 0, 10, 10, 0.9, 1), (0, 0, 10, 10, 0.8, 1))
    assert matches(first, dets((1, 1, 10, 10, 0.7, 1))) == 1  # one partner only
    assert matches(first, dets((0, 0, 10, 10, 0.7, 2))) == 0  # other class
    assert matches(first, dets((6, 6, 16, 16, 0.7, 1))) == 0  # IoU 16/184
    assert agreement([first], [dets((0, 0, 10, 10, 0.7, 1))]) == 2 / 3
