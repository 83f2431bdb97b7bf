from __future__ import annotations

import dataclasses

from deploy import sizing
from deploy.settings import Settings

MIB = 1024 * 1024


def test_shm_formula_for_the_default_yolo_640() -> None:
    s = Settings()
    # Written out independently of deploy/sizing.py: 80 classes, 640 input, anchors 80^2+40^2+20^2.
    anchors = 80 * 80 + 40 * 40 + 20 * 20
    per_item = s.max_image_bytes + 3 * 640 * 640 * 4 + (4 + 80) * anchors * 4 + 100 * 6 * 4 + 4 + 64
    needed = 2 * s.python_instances * s.max_batch * per_item * 2 + 64 * MIB
    expected = -(-needed // (64 * MIB)) * 64 * MIB
    assert anchors == sizing.anchor_count(640) == 8400
    assert sizing.shm_breakdown(s).per_item == per_item
    assert sizing.shm_size_bytes(s) == expected
    assert sizing.shm_size_bytes(s) > 64 * MIB  # far above Docker's default /dev/shm


def test_shm_is_a_64_mib_multiple_and_grows_with_batch_and_instances() -> None:
    base = Settings()
    sizes = [sizing.shm_size_bytes(dataclasses.replace(base, max_batch=b)) for b in (1, 4, 8, 32)]
    assert all(size % (64 * MIB) == 0 for size in sizes)
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    more = sizing.shm_size_bytes(dataclasses.replace(base, python_instances=4))
    assert more > sizing.shm_size_bytes(base)


def test_http_cap_fits_a_full_batch_of_maximum_images_and_no_more_than_needed() -> None:
    s = Settings()
    cap = sizing.http_max_input_bytes(s)
    full_batch = s.max_batch * (s.max_image_bytes + 4)  # BYTES elements carry a 4-byte length prefix
    assert full_batch < cap <= full_batch + 2 * MIB


def test_pod_memory_limit_includes_the_memory_backed_shm() -> None:
    s = Settings()
    assert sizing.pod_memory_limit_mib(s) == s.memory_request_mib + sizing.shm_size_bytes(s) // MIB
