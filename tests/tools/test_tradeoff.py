"""tools/tradeoff.py: which topologies a core count gets, and the row it makes of a bench result."""

from __future__ import annotations

from tools.tradeoff import row, table, topologies


def test_each_core_count_gets_each_distinct_topology_once() -> None:
    assert topologies(1) == [("2 x N (default)", 2, 1), ("1 x N", 1, 1)]
    assert topologies(2) == [("2 x N (default)", 2, 2), ("1 x N", 1, 2), ("2 x N/2", 2, 1)]
    assert [t[1:] for t in topologies(16)] == [(2, 16), (1, 16), (2, 8)]


def _round(p50: float, rps: float) -> dict:
    return {"raw": {"single": {"p50_ms": 90.0, "images_per_s": 11.0}, "alone": {"p50_ms": 30.0, "images_per_s": 33.0}},
            "lone_raw": "alone", "decode_p50_ms": 5.0,
            "ensemble_p50_c1_ms": p50, "ensemble_rps": rps, "failures": 0, "loadavg_1m": [1.0, 2.0]}


def test_a_row_takes_medians_over_the_paired_rounds() -> None:
    summary = {"c1_vs_raw_plus_decode": {"median": 1.1, "min": 1.0, "max": 1.2},
               "rps_vs_raw_single": {"median": 1.05, "min": 0.9, "max": 1.1}}
    bench = {"paired": {"rounds": [_round(38.0, 30.0), _round(40.0, 36.0), _round(44.0, 35.0)],
                        "summary": summary}}
    made = row(2, "1 x N", 1, 2, bench)
    assert (made["ensemble_p50_c1_ms"], made["ensemble_rps_c4"], made["raw_single_p50_ms"]) == (40.0, 35.0, 30.0)
    assert made["c1_vs_raw_plus_decode"] == summary["c1_vs_raw_plus_decode"]
    assert made["loadavg_1m"] == [1.0, 2.0] and made["lone_raw"] == ["alone"]
    assert made["raw_single_images_per_s"] == 33.0  # the lone reference, not the spinning session
    (line,) = table([made])[2:]
    assert line.startswith("| 2 | 1 x N (1 x 2) | 30.0 + 5.0 | 40.0 | 1.1 (1.0-1.2) |")
