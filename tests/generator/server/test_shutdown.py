from __future__ import annotations

import pytest

from generator.server.shutdown import EXIT_TIMEOUT_S, StopTiming


def test_each_layer_waits_longer_than_the_one_inside() -> None:
    timing = StopTiming()
    assert timing.exit_timeout_s == EXIT_TIMEOUT_S == 30
    assert timing.exit_timeout_s < timing.watchdog_grace_s < timing.container_grace_s
    assert (timing.watchdog_grace_s, timing.container_grace_s) == (40, 45)
    assert timing.server_args() == ["--exit-timeout-secs=30"]


@pytest.mark.parametrize("seconds", [0, -1, 3601])
def test_out_of_range_exit_timeouts_are_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="exit_timeout_s"):
        StopTiming(seconds)
