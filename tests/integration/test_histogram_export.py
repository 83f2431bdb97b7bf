"""The quality histograms of the real embedded Triton 2.51, re-exported as the watchdog's endpoint serves them:
promtool-clean histograms with exactly Triton's counter parts' samples, after real detections."""

from __future__ import annotations

import time

import numpy as np
import pytest

from clients import DetectionClient
from generator.server.histogram_export import reexport, scrape
from generator.serving.contract import DETECTIONS_METRIC, SCORE_METRIC
from generator.synthetic import encode, make_scene
from tests.generator.server.test_histogram_export import promtool_problems, samples

pytestmark = pytest.mark.integration


def test_the_real_servers_histograms_reexport_promtool_clean(triton_server) -> None:
    port = int(triton_server.metrics_url.rsplit(":", 1)[1])
    before = samples(scrape(port))
    scenes = [encode(make_scene(np.random.default_rng(seed), 640, 480).image) for seed in range(4)]
    with DetectionClient(triton_server.grpc_url, model=triton_server.model_name) as client:
        found = sum(len(result.detections) for result in client.detect_many(scenes))
    count = f"{DETECTIONS_METRIC}_count"
    deadline = time.monotonic() + 10  # the step publishes its counts once a second
    while True:
        text = scrape(port)
        grown = sum(v for (name, _), v in samples(text).items() if name == count) \
            - sum(v for (name, _), v in before.items() if name == count)
        if grown >= len(scenes) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert grown >= len(scenes) and found > 0
    assert any("_bucket\" suffix" in problem for problem in promtool_problems(text))  # Triton's own parts
    histograms = reexport(text)
    assert f"# TYPE {DETECTIONS_METRIC} histogram" in histograms and f"# TYPE {SCORE_METRIC} histogram" in histograms
    assert promtool_problems(histograms) == []
    assert samples(histograms) == samples(text)
