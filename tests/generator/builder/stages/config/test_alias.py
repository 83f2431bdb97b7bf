"""The alias of a versioned repository: a version's ensemble config under the plain name."""

from __future__ import annotations

from generator.builder.stages.config.alias import alias_files
from generator.builder.stages.config.render import parse_config

ENSEMBLE = """name: "yolo_v2"
platform: "ensemble"
max_batch_size: 4
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "num_detections" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "yolo_v2_nms" model_version: 2
  input_map { key: "IMAGE" value: "IMAGE" } output_map { key: "num_detections" value: "num_detections" } } ] }
version_policy { specific { versions: [ 2 ] } }
"""


def test_the_alias_is_the_version_ensemble_under_the_plain_name_with_folder_1() -> None:
    files = alias_files("yolo", ENSEMBLE)
    assert set(files) == {"yolo/config.pbtxt", "yolo/1/.keep"}
    config = parse_config("yolo", files["yolo/config.pbtxt"].decode())
    assert config.name == "yolo" and not config.HasField("version_policy")
    assert [(s.model_name, s.model_version) for s in config.ensemble_scheduling.step] == [("yolo_v2_nms", 2)]
