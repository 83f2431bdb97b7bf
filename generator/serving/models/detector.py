"""Triton model: the detector ONNX on ONNX Runtime, one inference for all queued requests.

With the ``detector_device`` parameter "gpu" (``--device gpu``, instances of KIND_GPU) the session runs on the
CUDA provider on this instance's GPU, and ``FORCE_CPU_ONLY_INPUT_TENSORS`` "no" lets a batch the GPU preprocess
left in GPU memory arrive there: it is bound in place (``ensemble_pipeline.cuda_provider``). The outputs come back
to the host once, for the NMS step. A dynamic-batch export gets one session per batch bucket, each run once at
load (``ensemble_pipeline.runner.batch_buckets``). Then the control images the build stored beside the graph
run on this provider: a GPU detector whose detections differ from the CPU provider's (what the accuracy gate
measured) refuses to load (``ensemble_pipeline.provider_check``). With the ``cpu_engine`` parameter "openvino"
(``--cpu-engine openvino``) the graph runs on OpenVINO's CPU plugin instead, checked the same way at load.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils
from ensemble_common import StepMetrics, failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.activity import Activity, lock_path
from ensemble_pipeline.cuda_provider import DEVICE_PARAMETER, CudaSettings, stack_tensors
from ensemble_pipeline.openvino_runner import ENGINE_PARAMETER, OPENVINO, OpenVinoRunner
from ensemble_pipeline.phases import (
    ALONE_DETECTOR_PHASES,
    DETECTOR_PHASES,
    GPU_DETECTOR_PHASES,
    PhaseClock,
    phase_series,
)
from ensemble_pipeline.provider_check import (
    CHECK_PARAMETER,
    MIN_AGREEMENT,
    MIN_AGREEMENT_PARAMETER,
    check_provider,
)
from ensemble_pipeline.runner import OnnxRunner, batch_buckets, served_item, step_session_threads


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.configure(args)
        self.telemetry = StepMetrics(args, phase_series(self.phases))

    def configure(self, args: dict[str, str]) -> None:
        """Everything but the telemetry, which a fused step (detector_fused.py) shares with its preprocess."""
        params = parameters(args)
        config = json.loads(args["model_config"])
        path = Path(args["model_repository"]) / args["model_version"] / params["onnx_file"]
        threads = step_session_threads(config, params)
        self.device_id: int | None = None
        cuda = None
        if params.get(DEVICE_PARAMETER) == "gpu":
            self.device_id = int(args["model_instance_device_id"])
            cuda = CudaSettings.from_parameters(params, self.device_id)
        max_batch = max(1, int(config.get("max_batch_size", 1)))
        # "true": always; "run": only while a run lasts; "alone": only while a run that found no other instance
        # running lasts, from a second session (ensemble_pipeline.activity); see pipeline.step_parameters
        spin = params.get("spin_wait")
        self.runner: OnnxRunner | OpenVinoRunner
        if params.get(ENGINE_PARAMETER) == OPENVINO:  # --cpu-engine openvino (ensemble_pipeline.openvino_runner)
            self.runner = OpenVinoRunner(str(path), threads)
        else:
            self.runner = OnnxRunner(str(path), threads, spin_wait=spin in ("true", "run"), spin_stop=spin == "run",
                                     cuda=cuda, buckets=batch_buckets(max_batch) if cuda else ())
        self.alone: tuple[Activity, OnnxRunner] | None = None
        if spin == "alone" and cuda is None:
            self.alone = (Activity(lock_path(args["model_repository"])),
                          OnnxRunner(str(path), threads, spin_wait=True, spin_stop=True))
        self.phases = GPU_DETECTOR_PHASES if cuda else ALONE_DETECTOR_PHASES if self.alone else DETECTOR_PHASES
        if isinstance(self.runner, OpenVinoRunner):
            self.check_engine(path, params, f"OpenVINO {self.runner.version} on the CPU ({threads} threads)")
            self.runner.warm_up()  # the plugin prepares each input shape on its first run
        if cuda is not None:
            # Each session sets up its cuDNN state, kernels and memory on its first run: all of them now.
            size = (int(params["input_height"]), int(params["input_width"]))
            # The graph's own input shape: a fused step's config input is the encoded image (detector_fused.py).
            dims = [d if isinstance(d, int) else -1 for d in self.runner.input_shape[-3:]]
            warmed = self.runner.warm_up((1, max_batch), served_item(dims, size))
            pb_utils.Logger.log_info(f"detector: CUDA provider on GPU {self.device_id} ({cuda.parameters()}), "
                                     f"sessions warmed up at batch {warmed}")
            self.check_engine(path, params, f"the CUDA provider on GPU {self.device_id}")

    def check_engine(self, path: Path, params: dict[str, str], engine: str) -> None:
        """Refuse to serve detections the accuracy gate never saw (provider_check.py): the control images the build
        stored, run on this engine, must give what ONNX Runtime's CPU provider gave."""
        check = params.get(CHECK_PARAMETER)
        if check:
            verdict = check_provider(self.runner.run, path.parent / check, engine,
                                     float(params.get(MIN_AGREEMENT_PARAMETER, MIN_AGREEMENT)))
            pb_utils.Logger.log_info(f"detector: {verdict}")

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            clock = PhaseClock()
            if self.device_id is None:
                batch, sizes = stack_inputs(requests, self.runner.input_name)
            else:
                tensors = [pb_utils.get_input_tensor_by_name(r, self.runner.input_name) for r in requests]
                batch, sizes = stack_tensors(tensors, self.device_id)
            clock.lap("inputs")
            outputs = self.run(batch, clock)
            responses = split_responses(dict(zip(self.runner.output_names, outputs, strict=True)), sizes)
            clock.lap("responses")
            self.telemetry.add(clock.counts())
            return responses
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "detector", exc)

    def run(self, batch: Any, clock: PhaseClock) -> list[Any]:
        """The detector's outputs of ``batch`` (host arrays), on the spinning session for a run alone."""
        if self.alone is None:
            return self.runner.run(batch, clock.lap)
        activity, spinning = self.alone
        with activity.running_alone() as alone:
            if not alone:
                return self.runner.run(batch, clock.lap)
            return spinning.run(batch, lambda phase: clock.lap("run_alone" if phase == "run" else phase))

    def finalize(self) -> None:
        self.telemetry.close()
        if self.alone is not None:
            self.alone[0].close()
