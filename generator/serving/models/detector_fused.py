"""Triton model: the preprocess and the detector in one step (``--fuse-preprocess``): encoded images in, the
detector's outputs and each image's letterbox parameters out, for the NMS step.

Nothing is handed over between the two: the letterboxed batch goes from the decoder to the detector's session in
the same process, which on the GPU (``--preprocess-device gpu --device gpu``) means it never leaves device memory
(no copy to the host, no tensor per request through Triton's CUDA pool, no copy back: issue 35). Each half is the
separate step's own code (``preprocess_step.py`` and ``detector_step.py`` are copies of ``preprocess.py`` and
``detector.py``), so every check, message, limit and session setting is theirs; one telemetry for both, under this
model's name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from detector_step import TritonPythonModel as DetectorStep
from ensemble_common import StepMetrics, failed
from ensemble_pipeline.contract import LETTERBOX
from ensemble_pipeline.phases import ALL_PHASES, PhaseClock, phase_series
from ensemble_pipeline.telemetry import preprocess_series
from preprocess_step import TritonPythonModel as PreprocessStep
from preprocess_step import request_error, request_slots


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.preprocess = PreprocessStep()
        self.preprocess.configure(args)
        self.detector = DetectorStep()
        self.detector.configure(args)
        phases = [p for p in ALL_PHASES if p in self.preprocess.phases or p in self.detector.phases]
        self.telemetry = StepMetrics(args, preprocess_series() + phase_series(phases))
        self.preprocess.telemetry = self.telemetry  # its rejection counts

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            return self._execute(requests)
        except Exception as exc:  # noqa: BLE001 -- the client must never see a traceback
            return failed(requests, "detector", exc)

    def _execute(self, requests: list[Any]) -> list[Any]:
        clock = PhaseClock()
        batch, bounds = self.preprocess.prepare_requests(requests, clock)
        outputs: list[Any] = []
        if batch.index:  # every image of the batch may have been refused
            images = batch.images
            if self.preprocess.output_dtype != np.uint8:
                images = self.preprocess.to_float(images, self.preprocess.output_dtype)
            outputs = self.detector.run(images, clock)
        names = self.detector.runner.output_names
        slot_of = {position: slot for slot, position in enumerate(batch.index)}
        responses = []
        for start, stop in bounds:
            error = request_error(batch, start, stop)
            if error is None and not outputs:
                error = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                    "invalid request: no image", pb_utils.TritonError.INVALID_ARG))
            if error is not None:
                responses.append(error)
                continue
            slots = request_slots(slot_of, start, stop)
            tensors = [pb_utils.Tensor(name, output[slots]) for name, output in zip(names, outputs, strict=True)]
            tensors.append(pb_utils.Tensor(LETTERBOX, np.ascontiguousarray(batch.letterbox[slots])))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        clock.lap("responses")
        self.telemetry.add(clock.counts())
        return responses

    def finalize(self) -> None:
        self.telemetry.close()
        if self.detector.alone is not None:
            self.detector.alone[0].close()
