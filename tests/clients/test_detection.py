import json
from typing import cast

import numpy as np
import pytest

from clients.detection import (
    Detection,
    DetectionResult,
    ModelInfo,
    decode_outputs,
    model_info_from_config,
    split_batches,
)
from clients.errors import ClientError
from clients.request import image_batch, image_request
from generator.serving.contract import OUTPUTS

NAMES = ("circle", "square", "triangle")
INFO = ModelInfo(name="yolo", max_batch_size=8, class_names=NAMES)


def padded_outputs(per_image, max_det=5, pad_value=0.0):
    """Contract-shaped outputs: num [N,1] INT32, boxes [N,max_det,4] FP32, scores/classes [N,max_det]."""
    n = len(per_image)
    num = np.array([[len(d)] for d in per_image], dtype=np.int32)
    boxes = np.full((n, max_det, 4), pad_value, dtype=np.float32)
    scores = np.full((n, max_det), pad_value, dtype=np.float32)
    classes = np.full((n, max_det), 0, dtype=np.int32)
    for i, dets in enumerate(per_image):
        for k, (box, score, cls) in enumerate(dets):
            boxes[i, k], scores[i, k], classes[i, k] = box, score, cls
    return {
        "num_detections": num,
        "detection_boxes": boxes,
        "detection_scores": scores,
        "detection_classes": classes,
    }


def test_decode_cuts_padding_and_maps_names():
    dets = [
        [((10.5, 20.25, 110.0, 220.75), 0.9, 1), ((0.0, 0.0, 5.0, 5.0), 0.3, 2)],
        [],
        [((1.0, 2.0, 3.0, 4.0), 0.5, 7)],
    ]
    # Padding filled with junk proves that only num_detections rows are read.
    results = decode_outputs(padded_outputs(dets, pad_value=99.0), INFO)
    assert [len(r) for r in results] == [2, 0, 1]
    first = results[0].detections[0]
    # approx compares equal to the float the dataclass's __eq__ finds in the score field.
    assert first == Detection(
        box=(10.5, 20.25, 110.0, 220.75), score=cast(float, pytest.approx(0.9)), class_id=1, class_name="square"
    )
    assert results[0].detections[1].class_name == "triangle"
    assert results[2].detections[0].class_name == "class_7"  # beyond the names list
    assert results[1].detections == ()
    np.testing.assert_allclose(results[0].boxes, [[10.5, 20.25, 110.0, 220.75], [0.0, 0.0, 5.0, 5.0]])
    assert results[1].boxes.shape == (0, 4)
    assert results[0].class_ids.tolist() == [1, 2]


def test_decode_all_empty_batch():
    results = decode_outputs(padded_outputs([[], []], max_det=100), INFO)
    assert results == [DetectionResult(()), DetectionResult(())]


def test_decode_full_image_uses_every_row():
    dets = [[((k, k, k + 1, k + 1), 1.0 - k / 10, k % 3) for k in range(5)]]
    (result,) = decode_outputs(padded_outputs(dets, max_det=5), INFO)
    assert [d.box[0] for d in result] == [0, 1, 2, 3, 4]


def test_decode_unbatched_model_outputs():
    out = padded_outputs([[((1, 2, 3, 4), 0.7, 0)]])
    unbatched = {
        "num_detections": out["num_detections"][0],
        "detection_boxes": out["detection_boxes"][0],
        "detection_scores": out["detection_scores"][0],
        "detection_classes": out["detection_classes"][0],
    }
    (result,) = decode_outputs(unbatched, INFO)
    assert result.detections[0].class_name == "circle"


def test_decode_rejects_count_beyond_padding():
    out = padded_outputs([[((1, 2, 3, 4), 0.7, 0)]], max_det=3)
    out["num_detections"][0, 0] = 4
    with pytest.raises(ClientError, match="outside"):
        decode_outputs(out, INFO)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("detection_boxes", np.zeros((1, 5, 5), np.float32)),
        ("detection_scores", np.zeros((1, 4), np.float32)),
        ("detection_classes", np.zeros((2, 5), np.int32)),
    ],
)
def test_decode_rejects_shape_mismatch(name, bad):
    out = padded_outputs([[]], max_det=5)
    out[name] = bad
    with pytest.raises(ClientError, match="unexpected shapes"):
        decode_outputs(out, INFO)


def test_decode_rejects_missing_output():
    out = padded_outputs([[]])
    out["detection_scores"] = None
    with pytest.raises(ClientError, match="detection_scores"):
        decode_outputs(out, INFO)


def config(names=None, max_batch=8):
    cfg = {"name": "yolo", "platform": "ensemble", "max_batch_size": max_batch}
    if names is not None:
        cfg["parameters"] = {"class_names": {"string_value": names}}
    return cfg


def test_model_info_from_http_and_grpc_shapes():
    http = config(json.dumps(list(NAMES)), 16)
    assert model_info_from_config("yolo", http) == ModelInfo("yolo", 16, NAMES)
    assert model_info_from_config("yolo", {"config": http}) == ModelInfo("yolo", 16, NAMES)


def test_model_info_without_names_falls_back():
    info = model_info_from_config("yolo", config(None, 0))
    assert info.max_batch_size == 0
    assert info.class_names == ()
    assert info.class_name(3) == "class_3"


@pytest.mark.parametrize("raw", ["[not json", json.dumps({"0": "a"}), json.dumps(["a", 1])])
def test_model_info_rejects_malformed_names(raw):
    with pytest.raises(ClientError, match="class_names"):
        model_info_from_config("yolo", config(raw))


@pytest.mark.parametrize(
    ("count", "limit", "sizes"),
    [(0, 8, []), (5, 8, [5]), (8, 8, [8]), (9, 8, [8, 1]), (17, 4, [4, 4, 4, 4, 1]), (3, 0, [1, 1, 1])],
)
def test_split_batches(count, limit, sizes):
    chunks = split_batches(count, limit)
    assert [len(c) for c in chunks] == sizes
    assert [i for c in chunks for i in c] == list(range(count))


def test_batch_array_is_n_by_1_objects():
    blobs = [b"\x89PNG", b"", b"\xff\xd8\xff" * 10]
    array = image_batch(blobs)
    assert array.shape == (3, 1)
    assert array.dtype == np.object_
    assert [array[i, 0] for i in range(3)] == blobs
    assert image_batch(blobs, batched=False).shape == (3,)


def test_image_request_names_the_contract_tensors():
    import tritonclient.grpc as grpcclient

    inputs, outputs = image_request(grpcclient, [b"a", b"b"])
    assert [(t.name(), t.shape(), t.datatype()) for t in inputs] == [("IMAGE", [2, 1], "BYTES")]
    assert [o.name() for o in outputs] == list(OUTPUTS)
