"""Triton model: the detector ONNX on ONNX Runtime, one inference for all queued requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ensemble_common import failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.runner import OnnxRunner, session_threads


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        groups = json.loads(args["model_config"]).get("instance_group", [])
        instances = sum(int(group.get("count", 1)) for group in groups) or 1
        self.runner = OnnxRunner(str(path), session_threads(int(params["intra_op_threads"]), instances))

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            batch, sizes = stack_inputs(requests, self.runner.input_name)
            outputs = self.runner.run(batch)
            return split_responses(dict(zip(self.runner.output_names, outputs, strict=True)), sizes)
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "detector", exc)
