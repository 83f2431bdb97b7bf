"""The accuracy gate on tiny graphs: a served graph with the class reduction is measured like with like."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.builder.stages.graph.prefix import add_normalisation_prefix
from generator.builder.stages.graph.suffix import add_class_reduction
from generator.evaluation.gate import ControlSet, run_gate, synthetic_control_set
from generator.model.onnx_inspect import inspect_onnx
from tests.fixtures.onnx_factory import make_detector, save, ultralytics_metadata

NAMES = ("a", "b", "c")


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("gate")
    original = make_detector("v8", num_classes=3, metadata=ultralytics_metadata(names=NAMES), seed=11)
    served = add_class_reduction(add_normalisation_prefix(original))
    return save(original, root / "fp32.onnx"), save(served, root / "served.onnx")


@pytest.fixture(scope="module")
def control() -> ControlSet:
    labelled = synthetic_control_set(count=6)
    # Pseudo-labels: the random tiny detector finds nothing of the synthetic ground truth.
    return ControlSet(labelled.images, labelled.data, None, "synthetic scenes, pseudo-labelled")


def test_gate_measures_the_reduced_served_graph_with_its_layout(graphs: tuple[Path, Path],
                                                                 control: ControlSet) -> None:
    reference, served = graphs
    info = inspect_onnx(reference)
    report = run_gate(reference, served, info, control, "fp16", 0.5, candidate_layout="v8_reduced")
    assert report.passed and report.reference.map50_95 > 0.5
    assert report.drop_points == 0.0 and report.candidate == report.reference
    assert report.raw_max_abs_diff == 0.0 and report.raw_mean_abs_diff == 0.0 and report.score_max_abs_diff == 0.0


def test_reading_the_reduced_graph_as_a_full_head_is_caught(graphs: tuple[Path, Path], control: ControlSet) -> None:
    # Negative control: without the served layout, rows 4-5 read as two class scores (class ids > 1).
    reference, served = graphs
    report = run_gate(reference, served, inspect_onnx(reference), control, "fp16", 0.5)
    assert report.score_max_abs_diff > 0.5 and not report.passed

