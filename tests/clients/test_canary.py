"""The client-side stable/canary split and the route the rollout publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.canary import Route, Splitter, canary_gone, read_route, write_route
from clients.errors import ClientError, InferenceError, ServerUnavailableError


@pytest.mark.parametrize("percent", [0.0, 10.0, 25.0, 33.3, 100.0])
def test_the_split_sends_exactly_the_share_spread_evenly(percent: float) -> None:
    splitter = Splitter()
    sent = [splitter.to_canary(percent) for _ in range(1000)]
    assert abs(sum(sent) - percent * 10) <= 1
    if 0 < percent < 100:
        gaps = [b - a for a, b in zip(*(lambda i: (i, i[1:]))([n for n, c in enumerate(sent) if c]), strict=False)]
        assert max(gaps) - min(gaps) <= 1  # no bursts


def test_the_route_round_trips_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "routing.json"
    write_route(path, Route("yolo", "yolo_v2", 10))
    assert read_route(path) == Route("yolo", "yolo_v2", 10.0)
    path.write_text('{"canary": "x"}')
    with pytest.raises(ClientError, match="the route is malformed"):
        read_route(path)
    with pytest.raises(ValueError, match=r"canary_percent must be within 0\.\.100"):
        Route("yolo", "yolo_v2", 150)


def test_only_a_canary_that_is_gone_sends_the_request_to_stable() -> None:
    assert canary_gone(InferenceError("Request for unknown model: 'yolo_v2' is not found", "NOT_FOUND"))
    assert canary_gone(ServerUnavailableError("draining"))
    assert not canary_gone(InferenceError("invalid image: truncated JPEG", "INVALID_ARGUMENT"))
