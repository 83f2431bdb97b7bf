"""The user's labelled control images: each side's detections on them scored against the labels (COCO mAP@0.5,
faster-coco-eval through generator.evaluation), so the record says how both versions do on the user's own data,
not only whether they agree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from generator.operate.rollout.agreement import Detections


def map50(truth: Mapping[str, Any], detections: Sequence[Detections]) -> float:
    """mAP@0.5 of one side's detections, image i of the control set being ``truth["images"][i]``."""
    from generator.evaluation.accuracy import coco_map
    from generator.evaluation.reference import ImageDetections

    records = truth["images"]
    if len(records) != len(detections):
        raise ValueError(f"{len(detections)} results for {len(records)} labelled images")
    predictions = {int(record["id"]): ImageDetections(np.asarray(boxes, np.float32).reshape(-1, 4),
                                                      np.asarray(scores, np.float32), np.asarray(classes, np.int32))
                   for record, (boxes, scores, classes) in zip(records, detections, strict=True)}
    return round(coco_map(dict(truth), predictions).map50, 4)
