"""Deterministic, labelled synthetic scenes: tests, calibration, accuracy gates, benchmarks, demo training."""

from generator.synthetic.dataset import encode, write_dataset
from generator.synthetic.scenes import CLASS_NAMES, Scene, make_scene

__all__ = ["CLASS_NAMES", "Scene", "encode", "make_scene", "write_dataset"]
