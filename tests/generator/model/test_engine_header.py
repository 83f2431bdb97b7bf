import json

import pytest

from generator.model.engine_header import (
    EngineHeaderError,
    load_plan,
    read_ultralytics_header,
    strip_ultralytics_header,
)

# Stand-in for serialized plan bytes; real plans are binary and start with no JSON.
PLAN = bytes(range(256)) * 8


def ultralytics_engine(metadata: dict, plan: bytes = PLAN) -> bytes:
    """The layout Ultralytics' exporter writes: int32 LE length, JSON, plan."""
    meta = json.dumps(metadata).encode()
    return len(meta).to_bytes(4, byteorder="little", signed=True) + meta + plan


def test_strips_header_and_returns_metadata():
    metadata = {"names": {"0": "person"}, "imgsz": [640, 640], "batch": 1, "task": "detect"}
    found, plan = strip_ultralytics_header(ultralytics_engine(metadata))
    assert found == metadata
    assert plan == PLAN


def test_bare_plan_is_returned_unchanged():
    found, plan = strip_ultralytics_header(PLAN)
    assert found is None and plan == PLAN


@pytest.mark.parametrize(
    "data",
    [
        (10).to_bytes(4, "little") + b"not json!!" + PLAN,  # plausible length, not JSON
        (2).to_bytes(4, "little") + b"[]" + PLAN,  # JSON but not an object
        (1 << 30).to_bytes(4, "little") + b"{}" + PLAN,  # length beyond the file
        (-5).to_bytes(4, "little", signed=True) + b"{}" + PLAN,
        (len(PLAN)).to_bytes(4, "little") + PLAN,  # length equal to the rest: nothing left for a plan
    ],
)
def test_near_misses_are_not_headers(data):
    assert read_ultralytics_header(data) is None
    assert strip_ultralytics_header(data) == (None, data)


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(EngineHeaderError, match="empty"):
        strip_ultralytics_header(b"")
    path = tmp_path / "yolo.engine"
    path.write_bytes(b"")
    with pytest.raises(EngineHeaderError, match=r"yolo\.engine"):
        load_plan(path)


def test_load_plan_from_file(tmp_path):
    path = tmp_path / "yolo.engine"
    path.write_bytes(ultralytics_engine({"stride": 32}))
    assert load_plan(path) == ({"stride": 32}, PLAN)
    with pytest.raises(EngineHeaderError, match="cannot read"):
        load_plan(tmp_path / "missing.engine")
