"""The control images mirrored to both sides of a rollout, through the project's client."""

from __future__ import annotations

from collections.abc import Sequence

from generator.operate.rollout.agreement import Detections


def mirror(url: str, models: Sequence[str], images: Sequence[bytes], timeout_s: float = 30.0
           ) -> dict[str, list[Detections]]:
    """The detections of every model for the same control images, image by image (one client per model)."""
    from clients import DetectionClient

    results: dict[str, list[Detections]] = {m: [] for m in models}
    for model in models:
        with DetectionClient(url, model=model, timeout_s=timeout_s) as client:
            for image in images:
                found = client.detect(image)
                results[model].append((found.boxes, found.scores, found.class_ids))
    return results
