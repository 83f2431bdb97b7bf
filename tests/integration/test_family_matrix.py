"""Every Ultralytics detection family, built in every precision for every target, served and compared.

The detectors are real Ultralytics exports of the packaged model YAMLs (``tests/fixtures/ultralytics``):
YOLOv5u, v8, v9t, v10 and 26 (NMS-free end-to-end heads), 11 and 12, each with a static batch of 1 and a
dynamic batch. For each one and each precision (FP32, FP16, INT8 with ONNX Runtime's quantizer and, on the
dynamic exports of YOLO11 and YOLO26 for ``embedded`` and ``tensorrt``, INT8 with NVIDIA Model Optimizer) the test
builds the ``embedded``, ``onnxruntime`` and ``tensorrt --defer-plan`` repositories, checks each served
graph against TensorRT's ONNX parser rules, serves the embedded ones on the real embedded Triton (one server
per family) and compares what the ensemble returns with ONNX Runtime running the same served graph on the same
letterboxed images through the serving NMS: the same boxes (to 1e-3 px), scores within 1e-4.

Random weights would give nothing to compare: the fixtures refill each convolution so its output has unit
spread on synthetic scenes and set the class biases so that scores spread over (0, 1) instead of sitting at
1e-5; at the default threshold (0.25) the test scenes then keep from none to the cap of 100 boxes (asserted
below: at least one image per model has three or more). The outcome of every cell is
the README's family matrix; the last test fails when the README says something else
(``TDE_WRITE_FAMILY_MATRIX=1`` rewrites it from the measured outcome).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import TypedDict

import numpy as np
import onnx
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import Target
from generator.builder.stages.precision.tensorrt_compat import find_incompatibilities
from generator.builder.tasks import require_served_task
from generator.errors import GeneratorError, ModelInspectionError
from generator.evaluation.reference import ReferencePipeline
from generator.model.onnx_inspect import inspect_onnx
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.synthetic import encode, make_scene
from tests.fixtures import ultralytics as fixtures
from tests.integration import family_matrix as matrix
from tests.integration.helpers import infer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CELLS: dict[tuple[str, str, str, str], matrix.Cell] = {}
SCENE_SIZES = ((640, 480), (1280, 720), (480, 640))
BOX_TOLERANCE_PX, SCORE_TOLERANCE = 1e-3, 1e-4


class Workspace(TypedDict):
    root: Path
    calib: Path  # the calibration images
    precision: matrix.SharedPrecision


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("families")
    return {"root": root, "calib": matrix.write_calibration_images(root / "calib"),
            "precision": matrix.SharedPrecision()}


def _scenes() -> list[bytes]:
    rng = np.random.default_rng(31)
    return [encode(make_scene(rng, width, height).image) for width, height in SCENE_SIZES]


def _served_graph(repository: Path) -> Path:
    (path,) = sorted(repository.glob("*_detector/1/*.onnx"))
    return path


def _build_cell(onnx_path: Path, key: str, family: str, mode: str, precision: str, target: Target,
                workspace: Workspace) -> tuple[matrix.Cell, Path | None]:
    cell = matrix.Cell()
    output = Path(workspace["root"]) / "repos" / matrix.model_name(family, mode, precision, target)
    build = matrix.options(family, mode, precision, target, workspace["calib"])
    shared: matrix.SharedPrecision = workspace["precision"]
    try:
        result = build_repository(onnx_path, output, build, precision_transform=shared.transform(key))
    except GeneratorError as exc:
        cell.refused = str(exc)
        return cell, None
    cell.built = True
    facts = result.manifest.precision_facts
    cell.fp32_fallback = len([n for n in facts.get("fp32_fallback_nodes", "").split(",") if n])
    cell.parser_clean = not find_incompatibilities(onnx.load(str(_served_graph(output))))
    return cell, output


def _compare(server: EmbeddedServer, name: str, repository: Path, source: Path, scenes: list[bytes]) -> int:
    """Served detections against ONNX Runtime on the served graph; returns the most boxes of one image."""
    manifest = json.loads((repository / "manifest.json").read_text())
    detector = manifest["detector"]
    reference = ReferencePipeline(_served_graph(repository), conf_threshold=matrix.CONF_THRESHOLD,
                                  info=inspect_onnx(source), layout=detector["served_layout"])
    most = 0
    for index, image in enumerate(scenes):
        served = infer(server, name, [image])
        expected = reference.detect(image)
        count = int(served["num_detections"][0, 0])
        assert count == len(expected.scores), f"{name} image {index}: {count} served, {len(expected.scores)} expected"
        np.testing.assert_allclose(served["detection_boxes"][0, :count], expected.boxes, atol=BOX_TOLERANCE_PX)
        np.testing.assert_allclose(served["detection_scores"][0, :count], expected.scores, atol=SCORE_TOLERANCE)
        np.testing.assert_array_equal(served["detection_classes"][0, :count], expected.classes)
        most = max(most, count)
    return most


# Model Optimizer is an opt-in extra (.ci/run installs it where pip finds a CPU torch, or with TDE_MODELOPT=1):
# without it its cells are left out of the run and of the README comparison, never reported as built.
MODELOPT_MISSING = importlib.util.find_spec("modelopt") is None and os.environ.get("TDE_MODELOPT") != "1"


@pytest.mark.parametrize("family", fixtures.FAMILIES)
def test_family_builds_everywhere_and_serves_what_onnxruntime_computes(family: str, workspace) -> None:
    sources: dict[str, Path] = {}
    embedded: dict[tuple[str, str], Path] = {}
    for mode in fixtures.BATCH_MODES:
        key = f"{family}-{mode}"
        sources[mode] = fixtures.write(key, Path(workspace["root"]) / "onnx")
        for precision in matrix.PRECISIONS:
            for target in matrix.TARGETS:
                if not matrix.tested(family, mode, precision, target) or (
                        MODELOPT_MISSING and precision == "int8-modelopt"):
                    CELLS[family, mode, precision, target] = matrix.Cell(tested=False)
                    continue
                cell, repository = _build_cell(sources[mode], key, family, mode, precision, target, workspace)
                CELLS[family, mode, precision, target] = cell
                if repository is not None and target == "embedded":
                    embedded[mode, precision] = repository
    refused = {k: c.refused for k, c in CELLS.items() if k[0] == family and c.refused}
    unclean = [k for k, c in CELLS.items() if k[0] == family and c.built and not c.parser_clean]
    repositories = list(embedded.values())
    log = Path(workspace["root"]) / f"{family}-tritonserver.log"
    server = EmbeddedServer(repositories[0], free_port(), free_port(), free_port(), log_file=log,
                            extra_args=tuple(f"--model-repository={r}" for r in repositories[1:]))
    scenes = _scenes()
    mismatched: dict[str, str] = {}
    server.start()
    try:
        # Eight ensembles (24 Python stubs) load here; the shared CI machine may take minutes to start them all.
        server.wait_ready(300)
        for (mode, precision), repository in embedded.items():
            name = matrix.model_name(family, mode, precision, "embedded")
            try:
                most = _compare(server, name, repository, sources[mode], scenes)
                assert most >= 3, f"{name}: at most {most} boxes per image; the comparison would prove little"
            except AssertionError as exc:
                mismatched[name] = str(exc)
                continue
            CELLS[family, mode, precision, "embedded"].served = True
    finally:
        server.stop()
    assert not mismatched, f"{family}: served detections differ from ONNX Runtime's: {mismatched}"
    assert not refused, f"{family}: builds refused: {refused}"
    assert not unclean, f"{family}: graphs TensorRT's parser would refuse: {unclean}"


def _head_refusals(directory: Path) -> dict[str, str]:
    refusals = {}
    for head in fixtures.UNSERVED_HEADS:
        path = fixtures.write(f"{head}-static", directory)
        with pytest.raises(ModelInspectionError) as caught:
            require_served_task(inspect_onnx(path))
        refusals[head] = str(caught.value).split(";")[0]
    return refusals


def test_readme_family_matrix_is_what_the_matrix_measured(tmp_path: Path) -> None:
    expected = {(f, m, p, t) for f in fixtures.FAMILIES for m in fixtures.BATCH_MODES
                for p in matrix.PRECISIONS for t in matrix.TARGETS}
    if not expected <= set(CELLS):
        pytest.skip("runs after the whole matrix (every family) in the same session")
    table = matrix.render_table(CELLS, _head_refusals(tmp_path))
    text = matrix.README.read_text()
    if MODELOPT_MISSING:
        def without_modelopt(rendered: str) -> str:
            return "\n".join(row for row in rendered.splitlines() if "| int8-modelopt |" not in row)

        assert without_modelopt(matrix.readme_table(text)) == without_modelopt(table), (
            f"README.md's family matrix differs from what the test measured (Model Optimizer rows not run):\n{table}")
        return
    if os.environ.get("TDE_WRITE_FAMILY_MATRIX") == "1":
        matrix.README.write_text(matrix.replace_readme_table(text, table))
        text = matrix.README.read_text()
    assert matrix.readme_table(text) == table, (
        "README.md's family matrix differs from what the test measured; rerun with TDE_WRITE_FAMILY_MATRIX=1 "
        f"to rewrite it. Measured:\n{table}")
