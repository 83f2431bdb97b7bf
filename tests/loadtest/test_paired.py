"""The lone raw reference of the paired rounds: the fastest session that runs one request at a time."""

from __future__ import annotations

from loadtest.paired import lone_reference


def test_a_lone_request_is_held_to_the_fastest_one_session_topology() -> None:
    raw = {"served": (40.0, 25.0), "single": (9.0, 110.0), "per_core": (45.0, 44.0), "alone": (38.0, 26.0)}
    # Two served instances run side by side: their p50 is no lone request's; spinning lost its time slices.
    assert lone_reference(raw, {"served": 2, "single": 1, "per_core": 2, "alone": 1}) == "alone"
    assert lone_reference(raw, {"served": 1, "single": 1, "per_core": 2}) == "served"
    quiet = {**raw, "single": (42.0, 23.0)}
    assert lone_reference(quiet, {"served": 1, "single": 1, "per_core": 2}) == "single"
