"""The service time the build measures by running the serving code on one batch."""

from __future__ import annotations

import cv2
import onnx
import pytest

from generator.builder.pipeline import _served_graph
from generator.builder.spec.options import BuildOptions
from generator.builder.stages.service_time import FRAME, FRAME_TEXT, measure_service_time
from generator.demo import DEMO_ONNX
from generator.model.onnx_inspect import inspect_onnx
from generator.repository.admission_record import ServiceTime


@pytest.fixture(scope="module")
def demo_served() -> tuple[onnx.ModelProto, object]:
    info = inspect_onnx(DEMO_ONNX)
    return _served_graph(onnx.load(str(DEMO_ONNX)), info, BuildOptions())


def test_every_step_is_timed_on_a_full_batch(demo_served) -> None:
    served, info = demo_served
    threads = cv2.getNumThreads()
    service = measure_service_time(served, info, BuildOptions(max_batch=4))
    assert cv2.getNumThreads() == threads  # the preprocess model's single thread is not left behind
    assert service.batch == 4
    assert set(service.steps_ms) == {"preprocess", "detector", "nms"}
    assert all(ms > 0 for ms in service.steps_ms.values())
    assert service.batch_ms == pytest.approx(sum(service.steps_ms.values()))
    assert service.source == "measured on the build machine"
    record = service.to_json()
    assert record["frame"] == f"{FRAME[0]}x{FRAME[1]} JPEG" and record["batch"] == 4


def test_a_bigger_batch_takes_longer(demo_served) -> None:
    served, info = demo_served
    one = min(measure_service_time(served, info, BuildOptions(max_batch=1)).batch_ms for _ in range(3))
    sixteen = measure_service_time(served, info, BuildOptions(max_batch=16)).batch_ms
    assert sixteen > 2 * one


def test_tensorrt_times_only_the_preprocess_step(demo_served) -> None:
    served, info = demo_served
    service = measure_service_time(served, info, BuildOptions(target="tensorrt"))
    assert set(service.steps_ms) == {"preprocess"}
    assert "preprocess only" in service.source


def test_the_flag_replaces_the_measurement(demo_served) -> None:
    served, info = demo_served
    assert measure_service_time(served, info, BuildOptions(service_ms=42.0)) == ServiceTime(8, 42.0, "--service-ms",
                                                                                          frame=FRAME_TEXT)
