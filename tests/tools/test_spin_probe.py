"""tools/gpu/spin_probe.py: the three detector session settings it compares, and one short run of each."""

from __future__ import annotations

import json
from pathlib import Path

from generator.demo import DEMO_ONNX
from tools.gpu.spin_probe import SETTINGS, _session, main


def test_each_setting_makes_the_session_it_names() -> None:
    made = {name: _session(str(DEMO_ONNX), entries).get_session_options() for name, entries in SETTINGS.items()}
    assert made["sleep"].get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert made["spin"].get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert made["spin-stop"].get_session_config_entry("session.force_spinning_stop") == "1"


def test_a_short_run_records_every_setting_at_every_stream_count(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    assert main(["--onnx", str(DEMO_ONNX), "--rounds", "2", "--window", "0.2", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [list(r) for r in record["rounds"]] == [list(SETTINGS), list(SETTINGS)[::-1]]  # order alternates
    for name in SETTINGS:
        for streams in ("1", "2"):
            cell = record["summary"][name][streams]
            assert cell["rps"] > 0 and cell["p50_ms"] > 0 and cell["cpu_ms_per_image"] > 0


def test_a_window_shorter_than_a_frame_still_times_a_frame_of_every_stream(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    assert main(["--onnx", str(DEMO_ONNX), "--rounds", "1", "--window", "0", "--out", str(out)]) == 0
    cells = [cell for setting in json.loads(out.read_text())["summary"].values() for cell in setting.values()]
    assert len(cells) == 6 and all(cell["rps"] > 0 and cell["p50_ms"] > 0 for cell in cells)
