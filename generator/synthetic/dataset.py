"""Synthetic scenes as files: encoded images and a COCO ``annotations.json`` for the evaluation tools."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from generator.synthetic.scenes import CLASS_NAMES, make_scene


def encode(image_rgb: np.ndarray, fmt: str = ".jpg", quality: int = 90) -> bytes:
    """Encode an RGB image to bytes (OpenCV wants BGR, so the channels are swapped here)."""
    params: list[int] = []
    if fmt.lower() in (".jpg", ".jpeg"):
        params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    elif fmt.lower() == ".webp":
        params = [cv2.IMWRITE_WEBP_QUALITY, int(quality)]
    ok, buf = cv2.imencode(fmt, cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise ValueError(f"OpenCV could not encode an image as {fmt!r}")
    return buf.tobytes()


def write_dataset(
    out_dir: Path,
    count: int,
    seed: int,
    sizes: Sequence[tuple[int, int]] = ((640, 480),),
    fmt: str = ".jpg",
) -> Path:
    """Write ``count`` scenes (cycling through ``sizes`` = (width, height)) and a COCO ``annotations.json``.

    Category ids are the class indices 0..nc-1, so detector outputs can be scored without remapping.
    Returns the path of the JSON file.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    for i in range(count):
        width, height = sizes[i % len(sizes)]
        scene = make_scene(rng, width, height)
        name = f"{i:06d}{fmt}"
        (out_dir / name).write_bytes(encode(scene.image, fmt))
        images.append({"id": i + 1, "file_name": name, "width": width, "height": height})
        for box, cls in zip(scene.boxes.tolist(), scene.classes.tolist(), strict=True):
            w, h = box[2] - box[0], box[3] - box[1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": int(cls),
                    "bbox": [box[0], box[1], w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    coco = {
        "info": {"description": f"synthetic shapes, seed {seed}"},
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i, "name": n, "supercategory": "shape"} for i, n in enumerate(CLASS_NAMES)],
    }
    path = out_dir / "annotations.json"
    path.write_text(json.dumps(coco))
    return path
