"""Every Ultralytics task head (yolo11n's segment, pose, obb and classify exports, static and dynamic batch) built in
every precision for every target, served and compared: the README's task matrix.

Like the family matrix (``test_family_matrix.py``, whose build options it takes): each head and precision is built
for ``embedded``, ``onnxruntime`` and ``tensorrt --defer-plan``, each built graph is checked against TensorRT's ONNX
parser rules, and the embedded builds are served on the real embedded Triton (one server per head) and compared
with the served graph run in-process through the serving pre- and post-processing on the same scenes: the same
detections (boxes, keypoints and rotated boxes to 1e-3 px, scores to 1e-4, classes and RLE masks equal), or the same
top classes. A build that refuses names its reason in the cell. That FP32 equals Ultralytics' own predict is
``test_task_heads.py`` (static) and ``test_task_dynamic.py`` (dynamic). The last test fails when the README says
something else (``TDE_WRITE_TASK_MATRIX=1`` rewrites it from the measured outcome).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import Target
from generator.builder.stages.precision.tensorrt_compat import find_incompatibilities
from generator.errors import GeneratorError
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.serving.contract import IMAGE, TASK_OUTPUTS
from generator.synthetic import encode
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import scene_images
from tests.integration import family_matrix
from tests.integration import task_matrix as matrix

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CELLS: dict[tuple[str, str, str, str], matrix.Cell] = {}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("task-matrix")
    return {"root": root, "calib": family_matrix.write_calibration_images(root / "calib"),
            "precision": family_matrix.SharedPrecision()}


def _build(source: Path, key: str, head: str, mode: str, precision: str, target: Target,
           workspace: dict) -> tuple[matrix.Cell, Path | None]:
    cell = matrix.Cell()
    output = Path(workspace["root"]) / "repos" / family_matrix.model_name(head, mode, precision, target)
    build = family_matrix.options(head, mode, precision, target, workspace["calib"])
    try:
        build_repository(source, output, build, precision_transform=workspace["precision"].transform(key))
    except GeneratorError as exc:
        cell.refused = str(exc).split(";")[0]
        return cell, None
    cell.built = True
    graphs = sorted(output.glob("*_detector/1/*.onnx"))
    cell.parser_clean = len(graphs) == 1 and not find_incompatibilities(onnx.load(str(graphs[0])))
    return cell, output


def _served(server: EmbeddedServer, name: str, task: str, image: bytes) -> dict:
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput(IMAGE, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=object).reshape(1, 1))
    result = client.infer(name, [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in TASK_OUTPUTS[task]])
    return {n: result.as_numpy(n)[0] for n in TASK_OUTPUTS[task]}


def _compare(server: EmbeddedServer, name: str, repository: Path, source: Path, task: str) -> int:
    manifest = json.loads((repository / "manifest.json").read_text())
    (graph,) = sorted(repository.glob("*_detector/1/*.onnx"))
    most = 0
    for index, scene in enumerate(scene_images()):
        image = encode(scene, ".png")
        try:
            found = matrix.served_vs_in_process(_served(server, name, task, image),
                                                matrix.in_process(graph, source, task, image, manifest), task)
        except AssertionError as exc:
            raise AssertionError(f"{name} scene {index}: {exc}") from exc
        most = max(most, found)
    return most


@pytest.mark.parametrize("head", list(matrix.HEADS))
def test_task_head_builds_everywhere_and_serves_what_the_graph_computes(head: str, workspace) -> None:
    task = matrix.HEADS[head]
    embedded: dict[tuple[str, str], tuple[Path, Path]] = {}
    for mode in fixtures.BATCH_MODES:
        key = f"{head}-{mode}"
        source = fixtures.write(key, Path(workspace["root"]) / "onnx")
        for precision in matrix.PRECISIONS:
            for target in matrix.TARGETS:
                cell, repository = _build(source, key, head, mode, precision, target, workspace)
                CELLS[head, mode, precision, target] = cell
                if repository is not None and target == "embedded":
                    embedded[mode, precision] = (repository, source)
    assert embedded, f"{head}: no embedded build"
    repositories = [repository for repository, _ in embedded.values()]
    server = EmbeddedServer(repositories[0], free_port(), free_port(), free_port(),
                            log_file=Path(workspace["root"]) / f"{head}-tritonserver.log",
                            extra_args=tuple(f"--model-repository={r}" for r in repositories[1:]))
    mismatched = {}
    server.start()
    try:
        server.wait_ready(300)
        for (mode, precision), (repository, source) in embedded.items():
            name = family_matrix.model_name(head, mode, precision, "embedded")
            try:
                most = _compare(server, name, repository, source, task)
                assert most >= 3, f"{name}: at most {most} detections per image; the comparison would prove little"
            except AssertionError as exc:
                mismatched[name] = str(exc)
                continue
            CELLS[head, mode, precision, "embedded"].served = True
    finally:
        server.stop()
    assert not mismatched, f"{head}: served outputs differ from the served graph's in-process: {mismatched}"
    unclean = [k for k, c in CELLS.items() if k[0] == head and c.built and not c.parser_clean]
    assert not unclean, f"{head}: graphs TensorRT's parser would refuse: {unclean}"


def test_readme_task_matrix_is_what_the_matrix_measured() -> None:
    expected = {(h, m, p, t) for h in matrix.HEADS for m in fixtures.BATCH_MODES for p in matrix.PRECISIONS
                for t in matrix.TARGETS}
    if not expected <= set(CELLS):
        pytest.skip("runs after the whole task matrix (every head) in the same session")
    table = matrix.render_table(CELLS)
    text = matrix.README.read_text()
    if os.environ.get("TDE_WRITE_TASK_MATRIX") == "1":
        matrix.README.write_text(matrix.replace_readme_table(text, table))
        text = matrix.README.read_text()
    assert matrix.readme_table(text) == table, (
        "README.md's task matrix differs from what the test measured; rerun with TDE_WRITE_TASK_MATRIX=1 to "
        f"rewrite it. Measured:\n{table}")
