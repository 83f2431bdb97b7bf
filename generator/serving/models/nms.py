"""Triton model: decode the head (detection, pose, OBB or segmentation) and run NMS for all queued requests at
once; a classifier's step returns its top-k classes instead."""

from __future__ import annotations

from typing import Any

from ensemble_common import StepMetrics, counted, failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.contract import BOXES, CLASSES, LETTERBOX, NUM_DETECTIONS, SCORES
from ensemble_pipeline.phases import NMS_PHASES, PhaseClock, phase_series
from ensemble_pipeline.tasks import head_spec, postprocess_task, top_classes
from ensemble_pipeline.telemetry import nms_series, output_counts


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = parameters(args)
        self.spec = head_spec(params)  # the layout, and for a pose or OBB head how to split it
        self.raw_name = params["raw_output"]
        self.protos_name = params.get("protos_input")  # a segmentation head's mask prototypes
        self.conf = float(params["conf_threshold"])
        self.iou = float(params["iou_threshold"])
        self.max_det = int(params["max_detections"])
        self.telemetry = StepMetrics(args, nms_series() + phase_series(NMS_PHASES))

    def execute(self, requests: list[Any]) -> list[Any]:
        try:
            clock = PhaseClock()
            raw, sizes = stack_inputs(requests, self.raw_name)
            outputs = self._outputs(requests, raw, sizes, clock)
            responses = split_responses(outputs, sizes)
            clock.lap("responses")
            self.telemetry.add(clock.counts())
            return responses
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "nms", exc)

    def _outputs(self, requests: list[Any], raw: Any, sizes: list[int], clock: PhaseClock) -> dict[str, Any]:
        """Every output of the batch: a classifier's top-k, else the task's detections (counted for telemetry)."""
        if self.spec.layout == "classify":  # no detections: the quality series stay detection-only
            clock.lap("inputs")
            top = top_classes(raw, self.spec.top_k)
            clock.lap("nms")
            return top
        letterbox, _ = stack_inputs(requests, LETTERBOX)
        protos = stack_inputs(requests, self.protos_name)[0] if self.protos_name else None
        clock.lap("inputs")
        found = postprocess_task(raw, self.spec, letterbox, self.conf, self.iou, self.max_det, protos)
        clock.lap("nms")
        out = found.detections
        keep = counted(requests, sizes)
        if keep is None:
            self.telemetry.add(output_counts(out.num_detections, out.scores, self.max_det))
        elif keep.any():  # a batch of probes alone adds nothing
            self.telemetry.add(output_counts(out.num_detections[keep], out.scores[keep], self.max_det))
        return {NUM_DETECTIONS: out.num_detections, BOXES: out.boxes, SCORES: out.scores, CLASSES: out.classes,
                **found.extras}

    def finalize(self) -> None:
        self.telemetry.close()
