"""tools/gpu/offline_summary.py: the per-step table and the served/engine ratio of every bench run."""

from __future__ import annotations

import json
from pathlib import Path

from tools.gpu.offline_summary import served_against_engine, step_lines


def _step(batch: float, queue_us: float, infer_us: float) -> dict[str, float]:
    return {"avg_batch": batch, "queue_us": queue_us, "compute_input_us": 1000.0, "compute_infer_us": infer_us,
            "compute_output_us": 500.0, "request_us": queue_us + infer_us + 1500.0}


def _bench(out: Path, label: str, rates: list[float]) -> None:
    cells = [{"concurrency": 64 * (i + 1), "point": {"throughput_rps": rate},
              "stages": {"y11_preprocess": _step(8, 2000, 20000 + i), "y11_detector": _step(30, 100000, 40000)},
              "phases": {"y11_preprocess": {"batches": 10 + i, "ms_per_batch": {"decode": 2.0 + i, "synchronize": 9.5}}}}
             for i, rate in enumerate(rates)]
    (out / "bench").mkdir(exist_ok=True)
    (out / "bench" / f"{label}.json").write_text(json.dumps({"label": label, "settings": {"model": "y11"},
                                                             "ensemble": cells}))


def test_each_bench_gets_its_steps_at_its_best_level_and_its_share_of_the_engine(tmp_path: Path) -> None:
    _bench(tmp_path, "y11-pool-0-r1", [800.0, 1200.0, 1100.0])
    _bench(tmp_path, "y11-pool-default-r2", [900.0, 1000.0])
    (tmp_path / "engine-y11.json").write_text(json.dumps(
        {"batches": {"8": {"engine_device": {"images_per_s": 1900}}, "32": {"engine_device": {"images_per_s": 2500}}}}))
    table = "\n".join(step_lines(tmp_path))
    assert "### y11-pool-0-r1: per step at 128 in flight (1200.0 img/s)" in table
    assert "| y11_detector | 30 | 100.00 | 1.00 | 40.00 | 0.50 | 141.50 |" in table
    assert "| y11_preprocess | 8 | 2.00 | 1.00 | 20.00 | 0.50 | 23.50 |" in table  # the best level's own row
    assert "- y11_preprocess (11 batches): decode 3.00, synchronize 9.50" in table  # its phases, the same level
    assert served_against_engine(tmp_path) == [
        "- y11-pool-0-r1: served 1200.0 img/s at best = 48% of the engine alone at batch 32 (2500 img/s)",
        "- y11-pool-default-r2: served 1000.0 img/s at best = 40% of the engine alone at batch 32 (2500 img/s)"]
