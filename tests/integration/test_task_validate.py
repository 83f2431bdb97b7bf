"""``generator validate`` on segment, pose and obb builds served by the real embedded Triton: box and task mAP on
YOLO txt labels, in-process and through the server, which must score what the same graph and post-processing
score in-process at the served thresholds.

The labels are the committed ones of the task fixtures' scenes (``tests/fixtures/ultralytics/task_labels.py``:
Ultralytics' predictions, jittered), laid out as Ultralytics' datasets are (``images/`` beside ``labels/``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.cli import main
from generator.server.embedded import EmbeddedServer
from generator.server.ports import free_port
from generator.synthetic import encode
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import scene_images
from tests.fixtures.ultralytics.task_labels import LABELS

pytestmark = pytest.mark.integration
KEYS = {"seg-static": ("box", "mask"), "pose-static": ("box", "pose"), "obb-static": ("obb", "obb_polygon")}


def _name(key: str) -> str:
    return key.replace("-", "_")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Path], EmbeddedServer]]:
    root = tmp_path_factory.mktemp("task-validate")
    repositories = {}
    for key in KEYS:
        repositories[key] = root / f"repo-{key}"
        build_repository(fixtures.write(key, root / "onnx"), repositories[key],
                         BuildOptions(name=_name(key), service_ms=50.0))
    first, *rest = repositories.values()
    with EmbeddedServer(first, free_port(), free_port(), free_port(), log_file=root / "tritonserver.log",
                        extra_args=tuple(f"--model-repository={r}" for r in rest)) as server:
        yield repositories, server


def _dataset(root: Path, key: str) -> Path:
    images = root / "data" / "images"
    images.mkdir(parents=True)
    for index, image in enumerate(scene_images()):
        (images / f"scene_{index}.png").write_bytes(encode(image, ".png"))
    shutil.copytree(LABELS / key, root / "data" / "labels")
    return images


@pytest.mark.parametrize("key", list(KEYS))
def test_validate_scores_the_task_in_process_and_through_triton(built, key: str, tmp_path: Path, capsys) -> None:
    repositories, server = built
    images = _dataset(tmp_path, key)
    assert main(["validate", "--model-repository", str(repositories[key]), "--images", str(images),
                 "--url", server.grpc_url]) == 0
    out = capsys.readouterr().out
    print(out)  # the numbers, for -s
    assert "in-process:" in out and f"through Triton at {server.grpc_url}:" in out
    report = json.loads((repositories[key] / "validation_task.json").read_text())
    served, local = report["served"], report["in_process_at_served_thresholds"]
    assert served["images"] == 6 and served["objects"] == report["in_process"]["objects"] > 30
    for name in KEYS[key]:
        whole_curve = report["in_process"]["metrics"][name]
        assert 0.05 < whole_curve["map50_95"] < 0.9 and whole_curve["map50"] >= whole_curve["map50_95"], name
        # the ensemble is the in-process graph and post-processing behind Triton: the same detections, the same mAP
        assert served["metrics"][name]["map50"] > 0.05, name  # the labels are predictions at the served threshold
        assert served["metrics"][name] == pytest.approx(local["metrics"][name], abs=1e-6), name


def test_validate_names_a_missing_label_folder_in_one_line(built, tmp_path: Path, capsys) -> None:
    repositories, _ = built
    images = tmp_path / "scenes"
    images.mkdir()
    (images / "scene.png").write_bytes(encode(scene_images()[2], ".png"))
    assert main(["validate", "--model-repository", str(repositories["pose-static"]), "--images", str(images)]) == 1
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "pass --labels DIR" in error
    assert main(["validate", "--model-repository", str(repositories["pose-static"]), "--images", str(images),
                 "--labels", str(tmp_path)]) == 1
    assert "no labelled object for the 1 images" in capsys.readouterr().err
