"""The start-up of `generator serve`; the command itself runs a real server in tests/integration/test_serve.py."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from generator.errors import ServerError
from generator.operate.serve import ServeSettings, _watchdog_endpoint, find_ensembles
from generator.server.environments import STUB_ENVIRONMENTS
from generator.server.ports import free_port
from generator.server.watchdog import WatchdogMetrics


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




def _settings(tmp_path: Path, metrics_port: int, watchdog_port: int | None) -> ServeSettings:
    return ServeSettings([tmp_path], STUB_ENVIRONMENTS["cpu"], http_port=free_port(), grpc_port=free_port(),
                         metrics_port=metrics_port, watchdog_metrics_port=watchdog_port)


def _held_pair() -> tuple[int, socket.socket]:
    """A port P that is free, with P + 1 held by a listening socket (another server's watchdog)."""
    while True:
        port = free_port()
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", port + 1))
        except OSError:
            holder.close()
            continue
        holder.listen()
        return port, holder


def test_the_derived_watchdog_port_is_the_metrics_port_plus_one_or_a_free_one(tmp_path: Path) -> None:
    port, holder = _held_pair()
    with holder:
        endpoint = _watchdog_endpoint(WatchdogMetrics(), _settings(tmp_path, port, None))
        try:
            taken = endpoint.server_address[1]
            assert taken not in (port, port + 1)
            with urllib.request.urlopen(f"http://127.0.0.1:{taken}/metrics", timeout=5) as response:
                assert response.status == 200
        finally:
            endpoint.shutdown()
            endpoint.server_close()
    endpoint = _watchdog_endpoint(WatchdogMetrics(), _settings(tmp_path, port, None))  # free again: P + 1
    try:
        assert endpoint.server_address[1] == port + 1
    finally:
        endpoint.shutdown()
        endpoint.server_close()


def test_a_taken_watchdog_port_asked_for_is_one_line(tmp_path: Path) -> None:
    port, holder = _held_pair()
    with holder, pytest.raises(ServerError, match=rf"^cannot serve the watchdog metrics on 127.0.0.1:{port + 1}: "
                                                   r".*leave it out for a free one, or 0 for none\)$"):
        _watchdog_endpoint(WatchdogMetrics(), _settings(tmp_path, port, port + 1))
    assert _watchdog_endpoint(WatchdogMetrics(), _settings(tmp_path, port, 0)) is None
