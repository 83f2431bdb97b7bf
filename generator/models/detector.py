"""Triton model: the detector ONNX on ONNX Runtime, one inference for all queued requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils
from ensemble_common import activity, failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.runner import OnnxRunner

RUNS_METRIC = "ensemble_detector_runs_total"


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        # Under load: few threads, no spinning, so the instances and the Python steps share the cores.
        self.shared = OnnxRunner(str(path), intra_op_threads=int(params["intra_op_threads"]))
        # A run that finds no other step of the ensemble running gets a second session over the same
        # weights with every core and workers that spin within the run: the latency of a lone detector.
        self.activity = activity(args)
        self.alone = (OnnxRunner(str(path), intra_op_threads=0, spin_wait=True, stop_spinning=True)
                      if self.activity is not None else None)
        # Which session ran, on Triton's metrics endpoint: shows whether the machine is ever idle.
        self.runs: dict[str, Any] = {}
        try:
            self.runs_family = pb_utils.MetricFamily(
                name=RUNS_METRIC, description="detector runs by session: alone (every core) or shared",
                kind=pb_utils.MetricFamily.COUNTER)
            self.runs = {mode: self.runs_family.Metric(labels={"model": args["model_name"], "session": mode})
                         for mode in ("alone", "shared")}
        except Exception as exc:  # noqa: BLE001 -- e.g. a server started with --allow-metrics=false
            pb_utils.Logger.log_warn(f"detector: no {RUNS_METRIC} metric: {exc}")

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            batch, sizes = stack_inputs(requests, self.shared.input_name)
            if self.activity is None or self.alone is None:
                alone, outputs = False, self.shared.run(batch)
            else:
                with self.activity.running_alone() as alone:
                    outputs = (self.alone if alone else self.shared).run(batch)
            if self.runs:
                self.runs["alone" if alone else "shared"].increment(1)
            return split_responses(dict(zip(self.shared.output_names, outputs, strict=True)), sizes)
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "detector", exc)
