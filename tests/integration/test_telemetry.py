"""Quality telemetry on the real embedded Triton's metrics endpoint: known images in, exact counts out.

The shared test server runs nothing else while a test runs, so the difference between two scrapes is what
the test sent. The steps publish once a second (generator/serving/telemetry.py): the test polls until the
NMS step's image count has caught up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from generator.serving.contract import (
    CAPPED_OUTPUTS_METRIC,
    DETECTIONS_BUCKETS,
    DETECTIONS_METRIC,
    EMPTY_OUTPUTS_METRIC,
    IMAGES_METRIC,
    REJECTED_METRIC,
    REJECTION_REASONS,
    SCORE_BUCKETS,
    SCORE_METRIC,
)
from generator.serving.telemetry import bucket_label
from generator.synthetic import encode
from loadtest.metrics import parse_prometheus, scrape
from tests.integration.helpers import hostile_bytes, infer, scene_bytes

pytestmark = pytest.mark.integration

# Each hostile image of test_ensemble.py and the reason the preprocess step counts it under.
REASON_OF = {
    "empty": "empty",
    "garbage": "format",
    "gif": "format",
    "truncated_jpeg": "truncated",
    "truncated_png": "truncated",
    "png_bomb_68_bytes": "too_large",
    "jpeg_bomb_header": "too_large",
    "jpeg_scan_bomb": "decode_budget",
    "png_over_decode_budget": "decode_budget",
}

Values = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def quality_values(metrics_url: str, model: str) -> Values:
    """Every ensemble_* series of ``model``: (name, labels other than model and version) -> value."""
    values: Values = {}
    for sample in parse_prometheus(scrape(metrics_url)):
        if sample.name.startswith("ensemble_") and sample.labels.get("model") == model:
            assert sample.labels["version"] == "1", sample
            extra = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in ("model", "version")))
            values[(sample.name, extra)] = sample.value
    return values


def delta(after: Values, before: Values) -> Values:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def wait_for(read: Callable[[], Values], targets: Values, timeout_s: float = 15.0) -> Values:
    """Read until every key in ``targets`` reaches its value: the step publishes its series one by one, each
    increment a round trip to the server, so one series can be a second ahead of another."""
    deadline = time.monotonic() + timeout_s
    while True:
        values = read()
        if all(values.get(k, 0.0) >= v for k, v in targets.items()) or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


def settled(read: Callable[[], Values], quiet_s: float = 2.5, timeout_s: float = 30.0) -> Values:
    """The series once they stop moving: the steps publish up to a second late (later on a busy machine), so
    images of an earlier test can still arrive after a first read."""
    deadline = time.monotonic() + timeout_s
    values = read()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = read()
        if again == values:
            return values
        values = again
    raise AssertionError(f"the step's series kept changing for {timeout_s:g} s with no traffic from this test")


def expected_histogram(name: str, values: Sequence[float], bounds: tuple[float, ...]) -> Values:
    data = np.asarray(values, dtype=np.float64)
    expected: Values = {(f"{name}_bucket", (("le", bucket_label(b)),)): float((data <= b).sum())
                        for b in (*bounds, float("inf"))}
    expected[(f"{name}_count", ())] = float(len(data))
    return expected


def test_nms_step_counts_images_empty_outputs_detections_and_scores(triton_server) -> None:
    nms = f"{triton_server.model_name}_nms"
    before = settled(lambda: quality_values(triton_server.metrics_url, nms))
    assert (IMAGES_METRIC, ()) in before, "the NMS step exports its series from the start"
    blank = encode(np.full((480, 640, 3), 114, dtype=np.uint8))
    images = [scene_bytes(40 + i, 640, 480) for i in range(5)] + [blank, blank]
    served = [infer(triton_server, triton_server.model_name, images[:4]),
              infer(triton_server, triton_server.model_name, images[4:], "http")]
    counts = [int(c) for out in served for c in out["num_detections"][:, 0]]
    scores = [float(s) for out in served for row, c in zip(out["detection_scores"], out["num_detections"][:, 0],
                                                             strict=True) for s in row[:c]]
    assert counts.count(0) == 2 and sum(counts) > 10

    targets = {(IMAGES_METRIC, ()): len(images), (EMPTY_OUTPUTS_METRIC, ()): 2,
                      (f"{SCORE_METRIC}_count", ()): len(scores)}
    after = wait_for(lambda: quality_values(triton_server.metrics_url, nms),
                     {k: before.get(k, 0.0) + v for k, v in targets.items()})
    got = delta(after, before)
    assert got[(IMAGES_METRIC, ())] == len(images)
    assert got[(EMPTY_OUTPUTS_METRIC, ())] == 2
    assert got[(CAPPED_OUTPUTS_METRIC, ())] == 0
    assert got[(f"{DETECTIONS_METRIC}_sum", ())] == sum(counts)
    for key, value in expected_histogram(DETECTIONS_METRIC, counts, DETECTIONS_BUCKETS).items():
        assert got[key] == value, key
    for key, value in expected_histogram(SCORE_METRIC, scores, SCORE_BUCKETS).items():
        assert got[key] == value, key
    assert got[(f"{SCORE_METRIC}_sum", ())] == pytest.approx(sum(scores), abs=1e-3)


def test_preprocess_step_counts_every_image_and_each_rejection_by_reason(triton_server) -> None:
    pre = f"{triton_server.model_name}_preprocess"
    before = settled(lambda: quality_values(triton_server.metrics_url, pre))
    assert {dict(extra)["reason"] for name, extra in before if name == REJECTED_METRIC} == set(REJECTION_REASONS)
    for case in REASON_OF:
        with pytest.raises(InferenceServerException, match="invalid image"):
            infer(triton_server, triton_server.model_name, [hostile_bytes(case)])
    infer(triton_server, triton_server.model_name, [scene_bytes(7, 320, 240)] * 2)

    total = len(REASON_OF) + 2
    targets: Values = {(IMAGES_METRIC, ()): total,
                        **{(REJECTED_METRIC, (("reason", r),)): float(list(REASON_OF.values()).count(r))
                           for r in REJECTION_REASONS}}
    after = wait_for(lambda: quality_values(triton_server.metrics_url, pre),
                     {k: before.get(k, 0.0) + v for k, v in targets.items()})
    got = delta(after, before)
    assert got[(IMAGES_METRIC, ())] == total
    for reason in REJECTION_REASONS:
        expected = sum(1 for r in REASON_OF.values() if r == reason)
        assert got[(REJECTED_METRIC, (("reason", reason),))] == expected, reason


def test_the_watchdogs_probes_are_left_out_of_the_quality_metrics(triton_server) -> None:
    """An idle server is probed every 5 s with an image that has no object: counted, it raised the empty-output
    share of a server nobody used (issue 37). The probe's parameter keeps it out; the answer is the same."""
    from generator.server.watchdog import check_inference, parse_address

    nms, pre = f"{triton_server.model_name}_nms", f"{triton_server.model_name}_preprocess"
    before = settled(lambda: quality_values(triton_server.metrics_url, nms))
    before_pre = quality_values(triton_server.metrics_url, pre)
    address = parse_address(triton_server.http_url)
    assert [check_inference(address, triton_server.model_name, 30) for _ in range(5)] == [0] * 5
    infer(triton_server, triton_server.model_name, [scene_bytes(61, 640, 480)])  # one user image
    after = settled(lambda: quality_values(triton_server.metrics_url, nms))
    assert delta(after, before)[(IMAGES_METRIC, ())] == 1
    assert delta(after, before).get((EMPTY_OUTPUTS_METRIC, ()), 0.0) == 0
    assert delta(quality_values(triton_server.metrics_url, pre), before_pre)[(IMAGES_METRIC, ())] == 1
