"""The steps' phase clock, and where the CPU and GPU preprocess and the detector runner end their phases."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from generator.serving.batch import prepare_batch
from generator.serving.contract import BATCHES_METRIC, PHASE_SECONDS_METRIC
from generator.serving.gpu.batch import GpuPreprocessor
from generator.serving.phases import (
    GPU_PREPROCESS_PHASES,
    PREPROCESS_PHASES,
    PhaseClock,
    phase_series,
)
from generator.serving.runner import OnnxRunner
from tests.fixtures.image_corpus import bad_images, zoo

from .gpu.host_model import host_parts

TARGET = (96, 128)


def test_each_lap_ends_its_phase_and_repeated_phases_add_up() -> None:
    ticks = itertools.count(0.0, 0.5)  # the clock moves half a second per read
    clock = PhaseClock(lambda: next(ticks))
    for phase in ("inputs", "decode", "letterbox", "decode", "letterbox", "responses"):
        clock.lap(phase)
    seconds = {dict(labels)["phase"]: value for (name, labels), value in clock.counts().items()
               if name == PHASE_SECONDS_METRIC}
    assert seconds == {"inputs": 0.5, "decode": 1.0, "letterbox": 1.0, "responses": 0.5}
    assert clock.counts()[(BATCHES_METRIC, ())] == 1.0


def test_phase_series_name_every_phase_once_and_the_batches() -> None:
    series = phase_series(GPU_PREPROCESS_PHASES)
    assert len(series) == len(set(series)) == len(GPU_PREPROCESS_PHASES) + 1
    assert (BATCHES_METRIC, ()) in series


class Recorder:
    def __init__(self) -> None:
        self.laps: list[str] = []

    def __call__(self, phase: str) -> None:
        self.laps.append(phase)


def test_the_cpu_preprocess_laps_decode_and_letterbox_per_image() -> None:
    good, bad = zoo(), bad_images()
    encoded = [*good.values(), *bad.values()]
    laps = Recorder()
    batch = prepare_batch(encoded, TARGET, lap=laps)
    assert laps.laps.count("decode") == len(encoded)  # a refused image ends its decode too
    assert laps.laps.count("letterbox") == len(batch.index)
    assert set(laps.laps) <= set(PREPROCESS_PHASES)


def test_the_gpu_preprocess_laps_its_phases_in_order() -> None:
    encoded = [*zoo().values(), *bad_images().values()]
    laps = Recorder()
    GpuPreprocessor(TARGET, parts=host_parts()).prepare_batch(encoded, laps)
    assert laps.laps == ["triage", "decode", "cpu_path", "letterbox", "synchronize"]
    assert set(laps.laps) <= set(GPU_PREPROCESS_PHASES)


def test_the_runner_laps_every_chunk_of_a_static_batch(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, save

    node = helper.make_node("Identity", ["images"], ["out"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "static2.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    laps = Recorder()
    out = OnnxRunner(str(path), 1).run(np.ones((5, 3), np.float32), laps)
    assert out[0].shape == (5, 3) and laps.laps == ["run", "run", "run"]  # chunks of 2, 2 and 1 (padded)
