"""A side's window from two scrapes of Triton's metrics text, as Triton and the steps write it."""

from __future__ import annotations

import numpy as np

from generator.operate.rollout.probes import offsets, subtract
from generator.operate.rollout.window import SideModels, parse_scrape, side_window

HEAD = """# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
# HELP ensemble_images_total Images that reached this step of the ensemble
# TYPE ensemble_images_total counter
# HELP ensemble_empty_outputs_total Images answered with zero detections
# TYPE ensemble_empty_outputs_total counter
# HELP ensemble_detections_per_image_bucket Detections returned per image (histogram cumulative buckets)
# TYPE ensemble_detections_per_image_bucket counter
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds
# TYPE nv_inference_request_duration_us counter
"""


def scrape(success: int, failure: int, images: int, empty: int, zero_bucket: int, duration_us: int) -> str:
    return HEAD + "\n".join([
        f'nv_inference_request_success{{model="yolo",version="1"}} {success}',
        f'nv_inference_request_success{{model="yolo_v1",version="1"}} {success}',
        f'nv_inference_request_failure{{model="yolo",reason="BACKEND",version="1"}} {failure}',
        'nv_inference_request_success{model="yolo_v2",version="1"} 7',
        f'ensemble_images_total{{model="yolo_v1_nms",version="1"}} {images}',
        f'ensemble_empty_outputs_total{{model="yolo_v1_nms",version="1"}} {empty}',
        f'ensemble_detections_per_image_bucket{{le="0",model="yolo_v1_nms",version="1"}} {zero_bucket}',
        f'ensemble_detections_per_image_bucket{{le="+Inf",model="yolo_v1_nms",version="1"}} {images}',
        f'nv_inference_request_duration_us{{model="yolo",version="1"}} {duration_us}',
        'nv_inference_request_duration_us{model="yolo_v2",version="1"} 99999999',
    ]) + "\n"


def test_the_window_is_the_difference_of_two_scrapes_for_the_side_models_only() -> None:
    before = parse_scrape(scrape(10, 1, 20, 2, 2, 0))
    after = parse_scrape(scrape(60, 3, 120, 12, 12, 102 * 25000))
    window = side_window(before, after, SideModels(("yolo", "yolo_v1"), "yolo_v1_nms", "yolo_v1_preprocess"))
    assert (window.requests, window.failures) == (102.0, 2.0)  # both ensembles of the stable side
    assert window.images == 100 and window.empty == 10 and window.share(window.empty) == 0.1
    assert window.detections_buckets == {"0": 10.0, "+Inf": 100.0}
    assert window.mean_ms == 25.0  # Triton's cumulative duration over the window's requests, in milliseconds
    assert abs(window.error_rate - 2 / 102) < 1e-12


def test_the_rollouts_own_probes_are_taken_out_of_the_users_window() -> None:
    """Two probes through the alias (one answered with nothing, one with three detections): the window holds the
    users' requests and images alone, while Triton's mean still divides its duration by every request it timed."""
    before = parse_scrape(scrape(10, 1, 20, 2, 2, 0))
    after = parse_scrape(scrape(60, 3, 120, 12, 12, 102 * 25000))
    answers = [(np.zeros((0, 4)), np.zeros(0, np.float32), np.zeros(0)),
               (np.zeros((3, 4)), np.asarray([0.9, 0.8, 0.97], np.float32), np.zeros(3))]
    users = subtract(after, offsets(answers, "yolo", "yolo_v1_nms", max_detections=3))
    window = side_window(before, users, SideModels(("yolo", "yolo_v1"), "yolo_v1_nms", "yolo_v1_preprocess"))
    assert (window.requests, window.images, window.empty) == (100.0, 98.0, 9.0)
    buckets = window.detections_buckets
    assert (buckets["0"], buckets["+Inf"]) == (9.0, 98.0)  # the empty answer's bucket and both probes' +Inf
    assert window.mean_ms == 25.0
