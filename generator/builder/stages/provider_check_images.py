"""The control images a GPU detector (or another CPU engine) checks its provider with at load
(generator/serving/provider_check.py).

A few synthetic scenes, letterboxed by the serving preprocess, and the head the served graph gives on ONNX Runtime's
CPU provider, the path the accuracy gate measures. Written beside the served graph of ``--target embedded --device
gpu`` and ``--cpu-engine openvino`` builds whose detector takes the letterboxed uint8 batch (``--normalise-in graph``, the default).
"""

from __future__ import annotations

import numpy as np

from generator.builder.spec.options import BuildOptions
from generator.model.onnx_inspect import DetectorInfo
from generator.serving.batch import prepare_batch
from generator.serving.provider_check import save_control
from generator.serving.runner import OnnxRunner
from generator.synthetic import encode, make_scene

CONTROL_IMAGES = 4
CONTROL_SIZE = (1280, 720)  # width, height: a camera frame, letterboxed like served ones
_SEED = 20_261_203


def wants_check(options: BuildOptions) -> bool:
    """The embedded GPU detector (uint8 input) and another CPU engine (``--cpu-engine``) check theirs at load."""
    embedded = options.target == "embedded" and options.normalise_in == "graph"
    return embedded and (options.detector_device == "gpu" or options.cpu_engine != "onnxruntime")


def control_file(served_onnx: bytes, info_served: DetectorInfo, options: BuildOptions) -> bytes:
    """The control file's bytes: images, letterbox, the NMS step's settings and the CPU provider's head."""
    rng = np.random.default_rng(_SEED)
    encoded = [encode(make_scene(rng, *CONTROL_SIZE).image) for _ in range(CONTROL_IMAGES)]
    batch = prepare_batch(encoded, info_served.image_size, reduced_decode=options.reduced_decode)
    raw = OnnxRunner(served_onnx).run(batch.images)[0]
    thresholds = (options.conf_threshold, options.iou_threshold, options.max_detections)
    return save_control(batch.images, batch.letterbox, info_served.layout, thresholds, raw)
