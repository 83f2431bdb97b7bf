from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from deploy import sizing
from deploy.settings import Settings
from generator.builder.spec.options import NormaliseIn

MIB = 1024 * 1024


def test_shm_formula_for_the_default_yolo_640() -> None:
    s = Settings()
    # Written out independently of deploy/sizing.py: 640 input, anchors 80^2+40^2+20^2, uint8 HWC images and
    # the reduced [6, A] FP32 head between the steps (the generator's defaults).
    anchors = 80 * 80 + 40 * 40 + 20 * 20
    per_item = s.max_image_bytes + 640 * 640 * 3 + 2 * 6 * 4 + 6 * anchors * 4 + 100 * 6 * 4 + 4
    needed = 2 * s.python_instances * s.max_batch * per_item * 2 + 64 * MIB
    expected = -(-needed // (64 * MIB)) * 64 * MIB
    assert anchors == sizing.anchor_count(640) == 8400
    assert sizing.shm_breakdown(s).per_item == per_item
    assert sizing.shm_size_bytes(s) == expected == 448 * MIB
    assert sizing.shm_size_bytes(s) > 64 * MIB  # far above Docker's default /dev/shm


def test_nms_in_the_graph_sends_padded_rows_instead_of_the_head() -> None:
    rows = sizing.step_tensor_bytes(Settings(nms_in_graph=True))["head"]
    assert rows == 100 * 6 * 4 < sizing.step_tensor_bytes(Settings())["head"]


def test_float_tensors_and_the_full_head_cost_what_they_weigh() -> None:
    base = Settings()
    tensors = sizing.step_tensor_bytes(base)
    floats = sizing.step_tensor_bytes(dataclasses.replace(base, normalise_in="preprocess"))
    full = sizing.step_tensor_bytes(dataclasses.replace(base, reduce_head=False))
    assert floats["PREPROCESSED"] == 4 * tensors["PREPROCESSED"] == 3 * 640 * 640 * 4
    assert full["head"] == (4 + 80) * 8400 * 4 == 14 * tensors["head"]
    # What the old formula assumed everywhere (FP32 tensors and the full head): 832 MiB.
    old = dataclasses.replace(base, normalise_in="preprocess", reduce_head=False)
    assert sizing.shm_size_bytes(old) == 832 * MIB


def test_shm_is_a_64_mib_multiple_and_grows_with_batch_and_instances() -> None:
    base = Settings()
    sizes = [sizing.shm_size_bytes(dataclasses.replace(base, max_batch=b)) for b in (1, 4, 8, 32)]
    assert all(size % (64 * MIB) == 0 for size in sizes)
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    more = sizing.shm_size_bytes(dataclasses.replace(base, python_instances=4))
    assert more > sizing.shm_size_bytes(base)


def test_request_limit_fits_a_full_batch_of_maximum_images_and_no_more_than_needed() -> None:
    s = Settings()
    cap = sizing.max_request_bytes(s)
    full_batch = s.max_batch * (s.max_image_bytes + 4)  # BYTES elements carry a 4-byte length prefix
    assert full_batch < cap <= full_batch + 256 * 1024
    # One image more than a full batch of the largest images does not fit.
    assert (s.max_batch + 1) * s.max_image_bytes > cap


def test_pod_memory_limit_includes_the_memory_backed_shm() -> None:
    s = Settings()
    assert sizing.pod_memory_limit_mib(s) == s.memory_request_mib + sizing.shm_size_bytes(s) // MIB


@pytest.mark.parametrize(("normalise_in", "reduce_head", "nms_in_graph"),
                         [("graph", True, False), ("preprocess", False, False), ("graph", True, True)])
def test_shm_terms_are_the_tensors_the_generator_really_builds(tmp_path: Path, normalise_in: NormaliseIn,
                                                               reduce_head: bool, nms_in_graph: bool) -> None:
    """Build the demo with the same options and read the dims and dtypes from the configs Triton will load."""
    from generator.builder.pipeline import build_repository
    from generator.builder.spec.options import BuildOptions
    from generator.builder.stages.config.render import parse_config
    from generator.demo import DEMO_ONNX
    from generator.model.onnx_inspect import inspect_onnx

    demo = inspect_onnx(Path(DEMO_ONNX))  # the bundled demo's own input size and classes
    assert demo.image_size[0] == demo.image_size[1]
    settings = Settings(input_size=demo.image_size[0], num_classes=len(demo.class_names), max_batch=2,
                        normalise_in=normalise_in, reduce_head=reduce_head, nms_in_graph=nms_in_graph)
    build_repository(Path(DEMO_ONNX), tmp_path / "repo",
                     BuildOptions(max_batch=2, normalise_in=normalise_in, reduce_head=reduce_head,
                                  nms_in_graph=nms_in_graph))
    bytes_of = {"TYPE_UINT8": 1, "TYPE_FP32": 4, "TYPE_INT32": 4}

    def tensor_bytes(model: str, kind: str, name: str | None = None) -> int:
        from tritonclient.grpc import model_config_pb2 as mc

        config = parse_config(model, (tmp_path / "repo" / model / "config.pbtxt").read_text())
        tensors = [t for t in getattr(config, kind) if name is None or t.name == name]
        total = 0
        for tensor in tensors:
            count = 1
            for dim in tensor.dims:
                count *= dim
            total += count * bytes_of[mc.DataType.Name(tensor.data_type)]
        return total

    expected = sizing.step_tensor_bytes(settings)
    assert tensor_bytes("yolo_preprocess", "output", "PREPROCESSED") == expected["PREPROCESSED"]
    assert 2 * tensor_bytes("yolo_preprocess", "output", "LETTERBOX") == expected["LETTERBOX"]
    nms_inputs = tensor_bytes("yolo_nms", "input")
    assert nms_inputs - tensor_bytes("yolo_nms", "input", "LETTERBOX") == expected["head"]
    assert tensor_bytes("yolo_nms", "output") == expected["detections"]
