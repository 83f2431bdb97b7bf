"""--preprocess-device gpu and --nms-in-graph: flags, the configs Triton will parse, the files and the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from generator.builder.pipeline import build_repository
from generator.builder.spec.declarations import from_record, to_flags, to_record
from generator.builder.spec.options import NMS_IN_GRAPH_MAX_DETECTIONS, BuildOptions, SpecError
from generator.builder.stages.config.render import check_ensemble_wiring, parse_config
from generator.builder.stages.graph.nms import NMS_OUTPUT
from generator.demo import DEMO_ONNX
from generator.serving.gpu.environment import REQUIREMENTS


@pytest.fixture(scope="module")
def gpu_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("gpu") / "repo"
    build_repository(DEMO_ONNX, output, BuildOptions(preprocess_device="gpu", nms_in_graph=True, instances=(2, 2, 1)))
    return output


def config(repo: Path, model: str) -> mc.ModelConfig:
    return parse_config(model, (repo / model / "config.pbtxt").read_text())


def test_flags_round_trip_through_the_manifest_record() -> None:
    options = BuildOptions(preprocess_device="gpu", nms_in_graph=True)
    assert to_flags(options) == ["--preprocess-device", "gpu", "--nms-in-graph"]
    assert from_record(BuildOptions, to_record(options), SpecError) == options


def test_bad_values_are_refused_with_the_flag_named() -> None:
    with pytest.raises(SpecError, match="--preprocess-device"):
        BuildOptions(preprocess_device="tpu")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=f"at most {NMS_IN_GRAPH_MAX_DETECTIONS} detections.*--max-detections"):
        BuildOptions(nms_in_graph=True, max_detections=NMS_IN_GRAPH_MAX_DETECTIONS + 1)
    BuildOptions(max_detections=NMS_IN_GRAPH_MAX_DETECTIONS + 1)  # without NMS in the graph the cap is free


def test_gpu_preprocess_runs_on_the_gpu_and_the_rest_stays_put(gpu_repo: Path) -> None:
    pre, det, nms = (config(gpu_repo, f"yolo_{step}") for step in ("preprocess", "detector", "nms"))
    assert [(g.kind, g.count) for g in pre.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 2)]
    assert pre.parameters["preprocess_device"].string_value == "gpu"
    # IMAGE is BYTES (always handed over in CPU memory); the Python steps keep FORCE_CPU_ONLY_INPUT_TENSORS at
    # its default, so Triton copies the GPU tensor to the host for the embedded detector.
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in det.parameters and "FORCE_CPU_ONLY_INPUT_TENSORS" not in nms.parameters
    assert [g.kind for g in det.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    ensemble = config(gpu_repo, "yolo")
    check_ensemble_wiring(ensemble, {c.name: c for c in (pre, det, nms)})


def test_nms_in_graph_sends_padded_rows_to_a_step_that_only_maps_them_back(gpu_repo: Path) -> None:
    det, nms = config(gpu_repo, "yolo_detector"), config(gpu_repo, "yolo_nms")
    (output,) = det.output
    assert (output.name, list(output.dims), output.data_type) == (NMS_OUTPUT, [100, 6], mc.TYPE_FP32)
    assert nms.parameters["layout"].string_value == "graph_nms"
    assert nms.parameters["raw_output"].string_value == NMS_OUTPUT
    served = onnx.load(str(gpu_repo / "yolo_detector" / "1" / "model.onnx"))
    assert "NonMaxSuppression" in {node.op_type for node in served.graph.node}


def test_gpu_code_travels_with_the_preprocess_model_only(gpu_repo: Path) -> None:
    gpu_files = {p.name for p in (gpu_repo / "yolo_preprocess/1/ensemble_pipeline/gpu").glob("*.py")}
    assert {"batch.py", "decode.py", "letterbox.py", "environment.py", "__init__.py"} <= gpu_files
    assert not (gpu_repo / "yolo_nms/1/ensemble_pipeline/gpu").exists()
    manifest = json.loads((gpu_repo / "manifest.json").read_text())
    assert "yolo_preprocess/1/ensemble_pipeline/gpu/batch.py" in manifest["files"]


def test_the_manifest_records_the_device_its_packages_and_the_graph(gpu_repo: Path, tmp_path: Path) -> None:
    manifest = json.loads((gpu_repo / "manifest.json").read_text())
    assert manifest["preprocess"] == {"device": "gpu", "requirements": list(REQUIREMENTS)}
    assert manifest["detector"]["served_layout"] == "graph_nms" and manifest["detector"]["nms_in_graph"] is True
    assert manifest["detector"]["reduce_head"] is True
    assert {"--preprocess-device", "gpu", "--nms-in-graph"} <= set(manifest["rebuild"])
    cpu = tmp_path / "cpu"
    build_repository(DEMO_ONNX, cpu, BuildOptions())
    cpu_manifest = json.loads((cpu / "manifest.json").read_text())
    assert cpu_manifest["preprocess"] == {"device": "cpu", "requirements": []}
    assert config(cpu, "yolo_preprocess").instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert "preprocess_device" not in config(cpu, "yolo_preprocess").parameters


def test_the_gpu_preprocess_hands_over_in_host_memory_to_the_embedded_detector_by_default(gpu_repo: Path,
                                                                                           tmp_path: Path) -> None:
    """--gpu-handoff auto: host for the Python-backend detector (the device hand-off answered requests with another
    image's detections under load on the H100), device for the native backends, which read GPU tensors in place."""
    assert config(gpu_repo, "yolo_preprocess").parameters["gpu_handoff"].string_value == "host"
    assert BuildOptions(preprocess_device="gpu", device="gpu", fuse_preprocess="off").preprocess_handoff == "host"
    # fused (the default there): nothing handed over, the batch stays on the GPU for the detector
    assert BuildOptions(preprocess_device="gpu", device="gpu").preprocess_handoff == "device"
    assert BuildOptions(target="tensorrt", preprocess_device="gpu").preprocess_handoff == "device"
    assert BuildOptions().preprocess_handoff is None
    with pytest.raises(SpecError, match=r"--gpu-handoff host.*--preprocess-device gpu"):
        BuildOptions(gpu_handoff="host")
    options = BuildOptions(preprocess_device="gpu", gpu_handoff="device", device="gpu")
    flags = to_flags(options)
    assert flags[flags.index("--gpu-handoff") + 1] == "device"
    assert from_record(BuildOptions, to_record(options), SpecError) == options
    device = tmp_path / "device"
    build_repository(DEMO_ONNX, device, options)
    assert "gpu_handoff" not in config(device, "yolo_preprocess").parameters
    # the GPU detector takes GPU or host tensors as they come (cuda_provider.stack_tensors)
    assert config(device, "yolo_detector").parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"
    rebuild = json.loads((device / "manifest.json").read_text())["rebuild"]
    assert rebuild[rebuild.index("--gpu-handoff") + 1] == "device"
