"""Deliberately broken INT8 calibrations of the real Ultralytics fixtures, for the layer-wise diagnosis tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from generator.synthetic import encode, make_scene

FAMILIES = ("yolov8", "yolo11")  # two Ultralytics families (C2f and C3k2 bodies)
SIZES = ((640, 480), (1280, 720), (480, 640))


def scenes(count: int, seed: int) -> list[bytes]:
    """Encoded synthetic camera scenes, the fixtures' refill domain."""
    rng = np.random.default_rng(seed)
    return [encode(make_scene(rng, *SIZES[i % len(SIZES)]).image) for i in range(count)]


def write_images(directory: Path, images: Sequence[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for index, data in enumerate(images):
        (directory / f"{index:03d}.jpg").write_bytes(data)
    return directory


def constant_image() -> bytes:
    """One mid-grey frame: calibrated on it alone, every activation range is far too narrow."""
    return encode(np.full((480, 640, 3), 114, np.uint8))


def broken_tensors(model: onnx.ModelProto, conv_positions: Sequence[int]) -> dict[str, list[str]]:
    """The data inputs of the body convolutions at ``conv_positions``, each with every Conv that reads it."""
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    readers: dict[str, list[str]] = {}
    for node in convs:
        readers.setdefault(node.input[0], []).append(node.name)
    return {convs[p].input[0]: readers[convs[p].input[0]] for p in conv_positions}


def narrow_cached_ranges(cache_dir: Path, tensors: Sequence[str], factor: float = 0.02) -> None:
    """Shrink the cached calibration range of ``tensors`` (a calibration that saw almost nothing there)."""
    (path,) = cache_dir.glob("*.json")
    cache = json.loads(path.read_text())
    for name in tensors:
        for end in ("lowest", "highest"):
            entry = cache["data"][name][end]
            entry["data"] = [value * factor for value in entry["data"]]
    path.write_text(json.dumps(cache))
