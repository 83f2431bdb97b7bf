"""``versus``'s decomposition as markdown: Triton's per-step parts of a served request, Ultralytics' own stages."""

from __future__ import annotations

from typing import Any

from .metrics import StageStats, phases_table
from .trace_steps import STEP_PARTS


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


def _served_rows(served: dict[str, Any], counts: list[str]) -> list[str]:
    first = served[counts[0]]
    rows = [("front door: read done -> ensemble starts", "receive")]
    for step in first["steps"]:
        rows += [(f"{step}: {part}", f"{step}.{part}") for part in STEP_PARTS]
    rows += [("last step's outputs -> ensemble ends", "tail"), ("response written", "send"),
             ("server: read done -> sent", "server_ms"), ("client, gRPC, loopback", "client_side_ms"),
             ("client p50", "client_p50_ms")]

    def value(n: str, key: str) -> Any:
        if "." in key:
            step, part = key.split(".", 1)
            return served[n]["steps_ms"].get(step, {}).get(part)
        return served[n].get(key)

    out = [f"| {label} | " + " | ".join(_num(value(n, key)) for n in counts) + " |" for label, key in rows]
    out.append("| traced requests | " + " | ".join(str(served[n]["requests"]) for n in counts) + " |")
    return out


def breakdown_lines(cores: int, breakdown: dict[str, Any] | None) -> list[str]:
    """Two tables per core count (medians in ms, one column per stream count)."""
    if not breakdown:
        return []
    counts = [str(n) for n in breakdown["streams"]]
    header = "| " + " | ".join(f"{n} stream{'s' if n != '1' else ''}" for n in counts) + " |"
    rule = "|---|" + "---:|" * len(counts)
    lines = ["", f"Where the time goes on {cores} cores (medians, ms; Triton's trace timestamps, every request of "
             "one traced window per stream count; 'output' overlaps the next step):", ""]
    served = breakdown.get("served", {})
    if "absent" in served:
        lines.append(f"Served decomposition absent: {served['absent']}.")
    else:
        lines += ["| served ensemble " + header, rule, *_served_rows(served, counts)]
        for n in counts:
            if served[n].get("phases"):  # the steps' own timers, over the same window
                stages = {k: StageStats(**v) for k, v in served[n].get("stages", {}).items()}
                lines += ["", f"Inside each step's execute at {n} stream{'s' if n != '1' else ''} (the steps' "
                          "phase timers; Triton's compute of the same requests):", "",
                          *phases_table(stages, served[n]["phases"])]
    ultra = breakdown.get("ultralytics")
    if ultra:
        lines += ["", "| Ultralytics predict (its own Profile; decode timed apart) " + header, rule]
        for label, key in (("decode (cv2.imdecode)", "decode_ms"), ("preprocess (letterbox, tensor)", "preprocess_ms"),
                           ("inference (ONNX Runtime)", "inference_ms"), ("postprocess (NMS, scale)", "postprocess_ms"),
                           ("per frame, as the stream waits", "p50_ms")):
            lines.append(f"| {label} | " + " | ".join(_num(ultra[n].get(key)) for n in counts) + " |")
    return lines
