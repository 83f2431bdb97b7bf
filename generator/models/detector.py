"""Triton model: the detector ONNX on ONNX Runtime, one inference for all queued requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils
from ensemble_common import activity, failed, parameters, split_responses, stack_inputs
from ensemble_pipeline.runner import OnnxRunner

RUNS_METRIC = "ensemble_detector_runs_total"
PUBLISH_IDLE_S = 0.1  # publish once the detector has been idle this long...
PUBLISH_EVERY_S = 1.0  # ...or at least this often under steady load


class RunCounter:
    """Counts runs per session and publishes them to Triton's metrics endpoint off the request path.

    ``Metric.increment`` is a round trip to the server that holds the GIL (0.2-0.6 ms here), too much to
    pay inside every request; a daemon thread publishes the counts in bulk instead.
    """

    def __init__(self, metrics: dict[str, Any]) -> None:
        self._metrics = metrics
        self._pending = dict.fromkeys(metrics, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_run = self._last_publish = time.monotonic()
        self._thread = threading.Thread(target=self._publish_loop, name="run-counter", daemon=True)
        self._thread.start()

    def count(self, session: str) -> None:
        with self._lock:
            self._pending[session] += 1
            self._last_run = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._publish(force=True)

    def _publish_loop(self) -> None:
        while not self._stop.wait(PUBLISH_IDLE_S):
            self._publish(force=False)

    def _publish(self, force: bool) -> None:
        now = time.monotonic()
        with self._lock:
            due = now - self._last_run >= PUBLISH_IDLE_S or now - self._last_publish >= PUBLISH_EVERY_S
            if not (force or due) or not any(self._pending.values()):
                return
            pending, self._pending = self._pending, dict.fromkeys(self._pending, 0)
            self._last_publish = now
        for session, runs in pending.items():
            if runs:
                self._metrics[session].increment(runs)


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
        self.runs: RunCounter | None = None
        try:
            self.runs_family = pb_utils.MetricFamily(
                name=RUNS_METRIC, description="detector runs by session: alone (every core) or shared",
                kind=pb_utils.MetricFamily.COUNTER)
            self.runs = RunCounter({
                session: self.runs_family.Metric(labels={"model": args["model_name"], "session": session})
                for session in ("alone", "shared")
            })
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
            if self.runs is not None:
                self.runs.count("alone" if alone else "shared")
            return split_responses(dict(zip(self.shared.output_names, outputs, strict=True)), sizes)
        except Exception as exc:  # noqa: BLE001 -- logged server-side, generic error to the client
            return failed(requests, "detector", exc)

    def finalize(self) -> None:
        if self.runs is not None:
            self.runs.close()
