"""Where a served request's time goes, step by step, from Triton's own per-request trace timestamps.

The embedded server starts with Triton's file tracing configured and off (``trace_flags``); ``traced`` turns it on
over the HTTP trace API (``POST /v2/trace/setting``, level TIMESTAMPS, every request) for one window and off again,
which makes Triton append the window's traces to the file. Triton stamps with the steady clock, the clock of
``time.monotonic_ns()`` on Linux, so a window's requests are picked from the file by time.

``decompose`` splits each ensemble request into what Triton measured:

- ``receive``: gRPC/HTTP read done -> the ensemble request starts (the front door);
- per step: ``hop`` (the previous step's outputs ready, or the ensemble's start, -> this step's request starts: the
  ensemble scheduler's hand-off), ``queue`` (-> an instance takes it), ``input`` (inputs gathered into the instance:
  for the Python backend, into the stub's shared memory), ``compute`` (the model's own work), ``output`` (the
  instance releasing its outputs; it overlaps the next step, which starts on the responses);
- ``tail``: the last step's outputs ready -> the ensemble request ends; ``send``: the response written back.

Medians over the window's requests, in milliseconds; ``server_ms`` is read done -> send done.
"""

from __future__ import annotations

import contextlib
import json
import logging
import statistics
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import LoadTestError

logger = logging.getLogger(__name__)
STEP_PARTS = ("hop", "queue", "input", "compute", "output")


def trace_flags(trace_file: Path) -> tuple[str, ...]:
    """Triton flags for file tracing, off until ``traced`` turns it on."""
    return ("--trace-config", "mode=triton", "--trace-config", f"triton,file={trace_file}",
            "--trace-config", "level=OFF", "--trace-config", "rate=1", "--trace-config", "count=-1")


def _set_trace(http_url: str, settings: dict[str, Any]) -> None:
    request = urllib.request.Request(f"http://{http_url}/v2/trace/setting", data=json.dumps(settings).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    except OSError as exc:
        raise LoadTestError(f"Triton's trace API at {http_url} refused the setting: {exc}") from exc


@contextlib.contextmanager
def traced(http_url: str, trace_file: Path) -> Iterator[list[int]]:
    """Trace every request while inside; yields [start_ns, end_ns] (filled at exit) of the traced window."""
    window = [time.monotonic_ns(), 0]
    _set_trace(http_url, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
                          "log_frequency": "0"})
    try:
        yield window
    finally:
        window[1] = time.monotonic_ns()
        _set_trace(http_url, {"trace_level": ["OFF"]})  # retiring the setting writes its traces


@dataclass
class Trace:
    model: str = ""
    parent: int | None = None
    stamps: dict[str, int] = field(default_factory=dict)
    children: list[Trace] = field(default_factory=list)


def _entries(trace_file: Path, wait_s: float) -> list[dict[str, Any]]:
    """The file's entries so far. Triton 2.51 keeps one file for the server's life (its trace API cannot change
    it): a JSON array it appends each retired setting's traces to and closes with ']' only at shutdown."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = trace_file.read_text().rstrip().rstrip(",")
            if not text.endswith("]"):  # still open; its buffered tail may end inside an entry
                return _open_array(text)
            return list(json.loads(text))
        except (OSError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise LoadTestError(f"Triton wrote no complete trace file at {trace_file}: {exc}") from exc
            time.sleep(0.05)


def _open_array(text: str) -> list[dict[str, Any]]:
    """The whole entries of an array Triton has not closed yet: all of them when the text ends on a whole entry
    (cutting at the last separator instead withheld the newest entry, often a request's REQUEST_START, until
    the next window wrote more), else those before the torn one."""
    try:
        return list(json.loads(text + "]"))
    except ValueError:
        return list(json.loads(text[:text.rfind('},{"id"') + 1] + "]")) if '},{"id"' in text else []


def read_traces(trace_file: Path, wait_s: float = 10.0) -> list[Trace]:
    """The file's top-level requests with their steps, each trace's entries merged by id."""
    return _merge(_entries(trace_file, wait_s))


def read_window(trace_file: Path, window: tuple[int, int], expected: int, wait_s: float = 15.0) -> list[Trace]:
    """The top-level requests started in ``window``, once ``expected`` of them are written whole (Triton writes a
    trace when its last reference goes, which can be after the setting is retired, and flushes the file in
    buffer-sized pieces). Whole means its REQUEST_END is there: Triton 2.51 at times writes a gRPC request's trace
    before its GRPC_SEND_END (measured here: 5 requests of 60, in 12 windows of 5), so that stamp is not waited for; the
    request's send and tail parts are then left out of the medians."""
    deadline = time.monotonic() + wait_s
    while True:
        tops = [t for t in read_traces(trace_file, wait_s) if window[0] <= t.stamps.get("REQUEST_START", -1) <= window[1]]
        whole = [t for t in tops if "REQUEST_END" in t.stamps]
        if len(whole) >= expected or time.monotonic() > deadline:
            return whole
        time.sleep(0.1)


def _merge(entries: list[dict[str, Any]]) -> list[Trace]:
    traces: dict[int, Trace] = {}
    for entry in entries:
        trace = traces.setdefault(int(entry["id"]), Trace())
        if "model_name" in entry:
            trace.model = str(entry["model_name"])
            trace.parent = int(entry["parent_id"]) if "parent_id" in entry else None
        for stamp in entry.get("timestamps", []):
            trace.stamps.setdefault(str(stamp["name"]), int(stamp["ns"]))
    for trace in traces.values():
        if trace.parent is not None and trace.parent in traces:
            traces[trace.parent].children.append(trace)
    tops = [t for t in traces.values() if t.parent is None]
    for top in tops:
        top.children.sort(key=lambda t: t.stamps.get("REQUEST_START", 0))
    return tops


def _ms(stamps: dict[str, int], start: str, end: str) -> float | None:
    if start in stamps and end in stamps:
        return (stamps[end] - stamps[start]) / 1e6
    return None


def _request_parts(top: Trace) -> dict[str, float | None]:
    """One ensemble request's parts, keyed ``step.part`` for the steps and by name for the rest."""
    s = top.stamps
    read_end = "GRPC_WAITREAD_END" if "GRPC_WAITREAD_END" in s else "HTTP_RECV_END"
    send_end = "GRPC_SEND_END" if "GRPC_SEND_END" in s else "HTTP_SEND_END"
    parts: dict[str, float | None] = {"receive": _ms(s, read_end, "REQUEST_START"),
                                      "send": _ms(s, "REQUEST_END", send_end),
                                      "server_ms": _ms(s, read_end, send_end)}
    ready = s.get("REQUEST_START")
    for step in top.children or [top]:
        t = step.stamps
        start = t.get("REQUEST_START")
        parts[f"{step.model}.hop"] = (start - ready) / 1e6 if step is not top and start and ready else None
        parts[f"{step.model}.queue"] = _ms(t, "REQUEST_START", "COMPUTE_START")
        parts[f"{step.model}.input"] = _ms(t, "COMPUTE_START", "COMPUTE_INPUT_END")
        parts[f"{step.model}.compute"] = _ms(t, "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START")
        parts[f"{step.model}.output"] = _ms(t, "COMPUTE_OUTPUT_START", "COMPUTE_END")
        ready = t.get("COMPUTE_OUTPUT_START", ready)
    if top.children and ready and "REQUEST_END" in s:
        parts["tail"] = (s["REQUEST_END"] - ready) / 1e6
    return parts


def decompose(tops: list[Trace], window: tuple[int, int] | None = None, model: str | None = None) -> dict[str, Any]:
    """Medians of every part over the requests (of ``model``, started inside ``window`` when given)."""
    chosen = [t for t in tops if (model is None or t.model == model)
              and (window is None or window[0] <= t.stamps.get("REQUEST_START", -1) <= window[1])]
    if not chosen:
        raise LoadTestError("no traced request in the window: is the trace API reachable and the model served?")
    collected: dict[str, list[float]] = {}
    for top in chosen:
        for key, value in _request_parts(top).items():
            if value is not None:
                collected.setdefault(key, []).append(value)
    steps = [c.model for c in chosen[0].children]
    medians = {key: round(statistics.median(values), 2) for key, values in collected.items()}
    return {"requests": len(chosen), "model": chosen[0].model, "steps": steps,
            "steps_ms": {step: {part: medians.get(f"{step}.{part}") for part in STEP_PARTS} for step in steps},
            **{key: medians.get(key) for key in ("receive", "tail", "send", "server_ms")}}
