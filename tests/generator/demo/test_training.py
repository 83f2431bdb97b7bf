"""The demo detector's training code (skipped where torch is not installed, as in CI)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from generator.demo.training.data import MAX_GT, batches, dihedral, make_batch  # noqa: E402
from generator.demo.training.train import main  # noqa: E402


def test_a_batch_is_a_function_of_seed_and_index_whatever_the_workers() -> None:
    first = make_batch(7, 3, 2, 128)
    assert first["images"].shape == (2, 3, 128, 128) and first["images"].dtype == torch.uint8
    assert first["boxes"].shape == (2, MAX_GT, 4) and first["classes"].shape == (2, MAX_GT)
    again = make_batch(7, 3, 2, 128)
    assert all(torch.equal(first[k], again[k]) for k in first)
    # count=4: the loader runs to its end and stops its workers itself (one left mid-iteration is shut down by
    # the garbage collector, whenever that runs, and a worker stopped then shows as an unraisable exception)
    inline = list(batches(7, 2, 128, workers=0, count=4))
    pooled = list(batches(7, 2, 128, workers=2, count=4))
    for a, b in zip(inline, pooled, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(inline[3]["images"], first["images"])
    assert not torch.equal(inline[0]["images"], inline[1]["images"])


def test_dihedral_moves_boxes_with_the_pixels() -> None:
    size = 64
    images = torch.zeros((8, 1, size, size), dtype=torch.uint8)
    boxes = torch.zeros((8, 1, 4))
    for i in range(8):
        x1, y1, x2, y2 = 3 + i, 5, 20 + i, 40  # an asymmetric box, so each transform shows
        images[i, 0, y1:y2, x1:x2] = 255
        boxes[i, 0] = torch.tensor([x1, y1, x2, y2], dtype=torch.float32)
    out, moved = dihedral(images, boxes, torch.Generator().manual_seed(0))
    seen = set()
    for i in range(8):
        ys, xs = np.nonzero(out[i, 0].numpy())
        found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        np.testing.assert_allclose(moved[i, 0].numpy(), found)
        seen.add(tuple(moved[i, 0].tolist()))
    assert len(seen) > 2  # several transforms were drawn


def test_training_runs_on_cpu_and_exports_an_ultralytics_shaped_onnx(tmp_path, capsys) -> None:
    import onnx

    out = tmp_path / "tiny.onnx"
    summary = tmp_path / "summary.json"
    code = main([
        "--out", str(out), "--device", "cpu", "--imgsz", "64", "--batch-size", "2", "--steps", "12",
        "--fresh-steps", "8", "--reuse", "2", "--pool", "2", "--workers", "0", "--log-every", "4",
        "--summary", str(summary),
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "step      0/12" in printed and "repeat with --steps 12 --reuse 2" in printed
    report = json.loads(summary.read_text())
    assert report["steps"] == 12 and report["scenes"] == 2 * (8 + 2)  # 8 fresh steps, then every 2nd
    model = onnx.load(str(out))
    dims = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 10, 8 * 8 + 4 * 4 + 2 * 2]
    assert {p.key: p.value for p in model.metadata_props}["imgsz"] == "[64, 64]"


def test_auto_steps_need_a_time_budget(tmp_path, capsys) -> None:
    assert main(["--out", str(tmp_path / "x.onnx"), "--device", "cpu"]) == 1
    assert "--time-budget-s" in capsys.readouterr().err
