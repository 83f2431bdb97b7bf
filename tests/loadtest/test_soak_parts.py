"""The soak's request plan, its traffic accounting and what it reads from samples (no server here)."""

from __future__ import annotations

import itertools

import pytest

from loadtest.errors import LoadTestError
from loadtest.hostile import BadImage
from loadtest.resources import ProcessSample, stub_info
from loadtest.soak import Sample, SoakSettings, Traffic, request_plan
from loadtest.soak_report import process_changes, read_samples, series, write_samples

BAD = [BadImage("a", b"A", "refused a"), BadImage("b", b"B", "refused b")]


def test_every_nth_request_is_the_next_bad_image():
    plan = list(itertools.islice(request_plan([b"g1", b"g2", b"g3"], BAD, 3), 9))
    assert plan == [b"g1", b"g2", BAD[0], b"g1", b"g2", BAD[1], b"g1", b"g2", BAD[0]]
    assert list(itertools.islice(request_plan([b"g"], BAD, 0), 3)) == [b"g", b"g", b"g"]


def test_traffic_counts_a_bad_image_as_refused_only_with_its_own_message():
    traffic = Traffic()
    traffic.bad(BAD[0], RuntimeError("[StatusCode.INVALID_ARGUMENT] invalid image: refused a"))
    traffic.bad(BAD[1], RuntimeError("something else"))
    traffic.bad(BAD[1], None)
    traffic.good(None)
    traffic.good(RuntimeError("timeout"))
    result = traffic.to_dict()
    assert result["bad"] == {"a": {"sent": 1, "rejected": 1}, "b": {"sent": 2, "rejected": 0}}
    assert result["good"] == {"ok": 1, "failed": 1} and result["bad_not_refused_as_expected"] == 2
    assert any("b was accepted" in line for line in result["unexpected"])


def _sample(t: float, stubs: dict[str, int], rss: int = 2**20) -> Sample:
    processes = [ProcessSample("tritonserver", 1, 100 * rss, 50, 0)]
    processes += [ProcessSample(name, pid, rss, 10, 2**20) for name, pid in stubs.items()]
    return Sample(t, tuple(processes), good_ok=int(t))


def test_series_add_up_the_server_and_its_stubs():
    named = series([_sample(0, {"pre_0_0": 2, "det_0_0": 3})])
    assert named["rss_total_mb"] == ("MB", [102.0]) and named["server_rss_mb"][1] == [100.0]
    assert named["stubs_rss_mb"][1] == [2.0] and named["fds_total"][1] == [70.0] and named["shm_mb"][1] == [2.0]


def test_a_stub_that_died_or_was_replaced_is_reported():
    first, last = _sample(0, {"pre_0_0": 2, "det_0_0": 3}), _sample(60, {"pre_0_0": 9, "nms_0_0": 4})
    assert process_changes([first, last]) == ["det_0_0 exited during the run", "pre_0_0 was replaced (pid 2 -> 9)",
                                              "nms_0_0 appeared during the run"]
    assert process_changes([first, first]) == []


def test_samples_survive_the_csv(tmp_path):
    samples = [_sample(0, {"pre_0_0": 2}), _sample(5.5, {"pre_0_0": 2}, rss=2**21)]
    assert read_samples(write_samples(samples, tmp_path / "samples.csv")) == samples


def test_stub_command_line_names_instance_and_region():
    cmdline = ["/x/triton_python_backend_stub", "/r/yolo_nms/1/model.py",
               "triton_python_backend_shm_region_1234", "1048576", "1048576", "77", "/x/python", "336",
               "yolo_nms_0_0", "DEFAULT"]
    info = stub_info(cmdline, 5)
    assert (info.name, info.shm_region) == ("yolo_nms_0_0", "triton_python_backend_shm_region_1234")


@pytest.mark.parametrize(("changes", "message"), [
    ({"warmup_s": 60.0, "duration_s": 60.0}, "must end before the run"),
    ({"rate_rps": -1.0}, "cannot be negative"),
    ({"concurrency": 0}, "must be positive"),
])
def test_impossible_settings_are_refused(changes, message):
    with pytest.raises(LoadTestError, match=message):
        SoakSettings(**{"duration_s": 600.0, **changes})
