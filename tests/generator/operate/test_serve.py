"""The start-up of `generator serve`; the command itself runs a real server in tests/integration/test_serve.py."""

from __future__ import annotations

from pathlib import Path

from generator.operate.serve import find_ensembles


def _model(repository: Path, name: str, config: str) -> None:
    (repository / name).mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)


def test_find_ensembles_in_every_repository(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _model(first, "yolo", 'name: "yolo"\nplatform: "ensemble"\nmax_batch_size: 8\n')
    _model(first, "yolo_nms", 'name: "yolo_nms"\nbackend: "python"\n')
    _model(second, "other", 'name: "other"\n  platform:   "ensemble"  \n')
    _model(second, "plan", 'name: "plan"\nplatform: "tensorrt_plan"\n')
    (second / "notes").mkdir()
    assert find_ensembles([first, second]) == ["other", "yolo"]


