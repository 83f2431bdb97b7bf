"""Triton model: the detector ONNX on ONNX Runtime, one inference for all queued requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ensemble_common import failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.runner import OnnxRunner


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        self.runner = OnnxRunner(str(path), intra_op_threads=int(params["intra_op_threads"]))

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            batch, sizes = stack_inputs(requests, self.runner.input_name)
            outputs = self.runner.run(batch)
            return split_responses(dict(zip(self.runner.output_names, outputs, strict=True)), sizes)
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "detector", exc)
