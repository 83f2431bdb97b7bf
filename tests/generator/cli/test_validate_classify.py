"""``validate`` on a classification build: top-1 and top-5 accuracy on class folders, through the served graph and
the classifier's preprocess, counted against what Ultralytics' predict answered on the same scenes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from generator.builder.pipeline import build_repository
from generator.builder.spec.options import BuildOptions
from generator.cli import main
from generator.evaluation.classify import accuracy
from generator.synthetic import encode
from tests.fixtures import ultralytics as fixtures
from tests.fixtures.ultralytics.predict import recorded_predictions, scene_images


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("classify")
    build_repository(fixtures.write("classify-static", root / "onnx"), root / "repo",
                     BuildOptions(name="cls", service_ms=50.0))
    return root / "repo"


def _folders(root: Path, labels: dict[int, str]) -> Path:
    for scene, label in labels.items():
        folder = root / label
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"scene{scene}.png").write_bytes(encode(scene_images()[scene], ".png"))
    return root


def test_validate_counts_top1_and_top5_against_the_class_folders(repository: Path, tmp_path: Path, capsys) -> None:
    predicted = [image["classes"] for image in recorded_predictions()["models"]["classify-static"]["images"]]
    assert 0 not in predicted[5]
    # scenes 0 and 1 under predict's best class, 2 under its second, 5 under a class not in its top 5
    labels = {0: str(predicted[0][0]), 1: str(predicted[1][0]), 2: str(predicted[2][1]), 5: "0"}
    images = _folders(tmp_path / "val", labels)
    assert main(["validate", "--model-repository", str(repository), "--images", str(images)]) == 0
    assert "in-process: top-1 0.5000, top-5 0.7500 on 4 images" in capsys.readouterr().out
    report = json.loads((repository / "classification.json").read_text())
    assert report == {"in_process": {"images": 4, "top1": 0.5, "top5": 0.75}, "served": None}


def test_validate_refuses_what_a_classifier_cannot_be_validated_on(repository: Path, tmp_path: Path,
                                                                   capsys) -> None:
    assert main(["validate", "--model-repository", str(repository)]) == 1
    assert "validated on --images DIR with one folder per class" in capsys.readouterr().err
    _folders(tmp_path / "val", {0: "no-such-class"})
    assert main(["validate", "--model-repository", str(repository), "--images", str(tmp_path / "val")]) == 1
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "folder 'no-such-class' names no class of the model" in error


def test_accuracy_counts_a_hit_anywhere_in_the_first_five() -> None:
    top = np.array([[3, 1, 2, 0, 4, 9], [5, 6, 7, 8, 9, 1], [1, 2, 3, 4, 5, 6]])
    found = accuracy(top, np.array([3, 9, 0]))
    assert (found.images, found.top1, found.top5) == (3, pytest.approx(1 / 3), pytest.approx(2 / 3))
