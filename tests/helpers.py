"""Helpers shared by tests of several parts (test modules import from here, never from each other)."""

from __future__ import annotations

from pathlib import Path

import onnx


def fix_batch(source: Path, destination: Path, batch: int) -> Path:
    """Write a copy of ``source`` whose batch axis is fixed, like a default (static) Ultralytics export."""
    model = onnx.load(str(source))
    for value in (*model.graph.input, *model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = batch
    onnx.save(model, str(destination))
    return destination
