"""The fleet's pure parts: every server's metrics summed into one window (Triton's mean latency too), a server that
left."""

from __future__ import annotations

import pytest

from generator.operate.admin import TritonAdminError
from generator.operate.fleet import FleetControl, headless, merge, resolve
from generator.operate.rollout.window import SideModels, parse_scrape, side_window
from tests.generator.operate.rollout.test_window import scrape

STABLE = SideModels(("yolo", "yolo_v1"), "yolo_v1_nms", "yolo_v1_preprocess")


def test_two_servers_add_up_in_one_window_and_so_does_their_time() -> None:
    last: dict = {}
    before = merge(last, {"a:8002": parse_scrape(scrape(10, 1, 20, 2, 2, 0)),
                          "b:8002": parse_scrape(scrape(5, 0, 10, 1, 1, 0))})
    after = merge(last, {"a:8002": parse_scrape(scrape(60, 3, 120, 12, 12, 102 * 25000)),
                         "b:8002": parse_scrape(scrape(25, 0, 50, 5, 5, 40 * 40000))})
    window = side_window(before, after, STABLE)
    assert (window.requests, window.failures) == (102.0 + 40.0, 2.0)  # server a: 2 x 50 + 2; b: 2 x 20
    assert (window.images, window.empty) == (140.0, 14.0)
    assert window.detections_buckets == {"0": 14.0, "+Inf": 140.0}
    assert window.mean_ms == round((102 * 25 + 40 * 40) / 142, 3)  # cumulative counters add up across servers


def test_a_server_that_left_keeps_its_last_counts_instead_of_taking_them_out_of_the_window() -> None:
    last: dict = {}
    before = merge(last, {"a:8002": parse_scrape(scrape(10, 0, 20, 0, 0, 0)),
                          "b:8002": parse_scrape(scrape(100, 0, 200, 0, 0, 0))})
    after = merge(last, {"a:8002": parse_scrape(scrape(30, 0, 60, 0, 0, 0))})  # b's pod is gone
    window = side_window(before, after, STABLE)
    assert window.requests == 40.0  # a's 2 x 20; without b's last counts the sum would fall and read 0


def test_a_headless_name_gives_every_address_on_the_same_ports() -> None:
    servers = headless("localhost", 8000, 8002)()
    assert servers and all(http.endswith(":8000") and metrics.endswith(":8002") for http, metrics in servers)
    assert set(resolve("localhost")) <= {"127.0.0.1", "::1"}
    assert ("[::1]:8000", "[::1]:8002") in servers or "::1" not in resolve("localhost")


def test_no_server_behind_the_name_is_an_error_that_says_so() -> None:
    with pytest.raises(TritonAdminError, match="no Triton server"):
        FleetControl(lambda: []).loaded()


def test_a_fleet_is_warmed_on_each_server_and_one_server_through_the_clients_url() -> None:
    """The rollout's warm-up reaches every pod itself: the clients' URL names a Service, which picks one."""
    from generator.operate.admin import ModelControl

    fleet = FleetControl(lambda: [("10.0.0.7:8000", "10.0.0.7:8002"), ("[fd00::9]:8000", "[fd00::9]:8002")])
    assert fleet.infer_urls("grpc://triton:8001") == ["http://10.0.0.7:8000", "http://[fd00::9]:8000"]
    assert ModelControl("127.0.0.1:8000", "127.0.0.1:8002").infer_urls("grpc://triton:8001") == ["grpc://triton:8001"]
