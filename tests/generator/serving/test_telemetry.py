"""Quality telemetry counted per batch: histogram series, output and rejection counts, the publisher thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from generator.serving.contract import (
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_BUCKETS,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    REJECTED_METRIC,
    REJECTION_REASONS,
    SCORE_METRIC,
)
from generator.serving.telemetry import (
    Publisher,
    Series,
    Tally,
    family_help,
    histogram_counts,
    histogram_series,
    nms_series,
    output_counts,
    preprocess_series,
    rejection_counts,
)


def bucket(name: str, le: str) -> Series:
    return (f"{name}_bucket", (("le", le),))


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    counts = histogram_counts("h", np.array([0.0, 1.0, 1.5, 7.0, 2000.0]), DETECTIONS_BUCKETS)
    assert counts[bucket("h", "0")] == 1  # le is inclusive: 0 <= 0
    assert counts[bucket("h", "1")] == 2
    assert counts[bucket("h", "2")] == 3
    assert counts[bucket("h", "5")] == 3
    assert counts[bucket("h", "10")] == 4
    assert counts[bucket("h", "1000")] == 4
    assert counts[bucket("h", "+Inf")] == 5
    assert counts[("h_sum", ())] == pytest.approx(2009.5)
    assert counts[("h_count", ())] == 5
    assert list(counts) == histogram_series("h", DETECTIONS_BUCKETS)


def test_output_counts_read_only_the_real_detections_of_each_image() -> None:
    max_det = 4
    num = np.array([[0], [2], [4]], dtype=np.int32)
    scores = np.zeros((3, max_det), dtype=np.float32)
    scores[1, :2] = [0.95, 0.31]
    scores[2, :] = [0.9, 0.8, 0.55, 0.25]
    scores[0, :] = 0.99  # padding past the count is not a detection
    counts = output_counts(num, scores, max_det)
    assert counts[(IMAGES_METRIC, ())] == 3
    assert counts[(EMPTY_OUTPUTS_METRIC, ())] == 1
    assert counts[(CAPPED_OUTPUTS_METRIC, ())] == 1
    assert counts[(f"{DETECTIONS_METRIC}_count", ())] == 3
    assert counts[(f"{DETECTIONS_METRIC}_sum", ())] == 6
    assert counts[bucket(DETECTIONS_METRIC, "0")] == 1
    assert counts[bucket(DETECTIONS_METRIC, "2")] == 2
    assert counts[bucket(DETECTIONS_METRIC, "5")] == 3
    assert counts[(f"{SCORE_METRIC}_count", ())] == 6
    assert counts[bucket(SCORE_METRIC, "0.3")] == 1  # 0.25
    assert counts[bucket(SCORE_METRIC, "0.4")] == 2  # + 0.31
    assert counts[bucket(SCORE_METRIC, "0.9")] == 5  # 0.9 is in le="0.9"
    assert counts[bucket(SCORE_METRIC, "1")] == 6
    assert counts[(f"{SCORE_METRIC}_sum", ())] == pytest.approx(3.76, abs=1e-5)


def test_rejection_counts_by_reason_and_unknown_reasons_count_as_other() -> None:
    counts = rejection_counts(5, ["truncated", "empty", "truncated", "something-new"])
    assert counts[(IMAGES_METRIC, ())] == 5
    assert counts[(REJECTED_METRIC, (("reason", "truncated"),))] == 2
    assert counts[(REJECTED_METRIC, (("reason", "empty"),))] == 1
    assert counts[(REJECTED_METRIC, (("reason", "other"),))] == 1


def test_every_exported_series_has_help_text_and_exists_from_the_start() -> None:
    reasons = {dict(extra)["reason"] for name, extra in preprocess_series() if name == REJECTED_METRIC}
    assert reasons == set(REJECTION_REASONS)
    for name, _ in nms_series() + preprocess_series():
        assert family_help(name)
    assert family_help(f"{SCORE_METRIC}_bucket").endswith("(histogram cumulative buckets)")
    # every key output_counts makes is a series the step registered
    assert set(output_counts(np.array([[1]]), np.array([[0.5]]), 1)) <= set(nms_series())


def test_tally_sums_from_many_threads_and_drain_starts_over() -> None:
    tally = Tally()
    key: Series = (IMAGES_METRIC, ())

    def add() -> None:
        for _ in range(1000):
            tally.add({key: 1.0})

    threads = [threading.Thread(target=add) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.drain() == {key: 4000.0}
    assert tally.drain() == {}


def test_publisher_retries_what_failed_without_counting_twice() -> None:
    tally = Tally()
    published: dict[Series, float] = {}
    errors: list[BaseException] = []
    fail = {"once": True}
    a, b = (IMAGES_METRIC, ()), (EMPTY_OUTPUTS_METRIC, ())

    def increment(series: Series, amount: float) -> None:
        if series == b and fail.pop("once", False):
            raise RuntimeError("server busy")
        published[series] = published.get(series, 0.0) + amount

    publisher = Publisher(tally, increment, interval_s=60, on_error=errors.append)
    tally.add({a: 3.0, b: 1.0})
    publisher.flush()
    assert published == {a: 3.0} and len(errors) == 1
    tally.add({a: 1.0})
    publisher.close()  # never started: close still publishes what is left
    assert published == {a: 4.0, b: 1.0}


def test_publisher_thread_publishes_on_its_own() -> None:
    tally = Tally()
    seen = threading.Event()
    publisher = Publisher(tally, lambda series, amount: seen.set(), interval_s=0.05).start()
    try:
        tally.add({(IMAGES_METRIC, ()): 1.0})
        assert seen.wait(5)
    finally:
        publisher.close()
    with pytest.raises(ValueError, match="interval_s"):
        Publisher(tally, lambda s, a: None, interval_s=0)
