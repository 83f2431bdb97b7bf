"""Agreement checks of the GPU-detector proof: served detections and heads against the CPU reference, hostile
images, GPU memory. The reference was computed where the repositories were built (``detector_cases``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from generator.serving.contract import BOXES, CLASSES, NUM_DETECTIONS, SCORES
from tools.gpu.detector_cases import CASES, HEAD_IMAGES, images, tensor_digest
from tools.gpu.gpu_http import InferError, TritonHttp, decode_response

IOU_MATCH = 0.9


def proof_images() -> dict[str, bytes]:
    return images()


def smi(query: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except FileNotFoundError:
        return "no nvidia-smi"


def _process_name(pid: str) -> str:
    """What a GPU process is: the Python-backend stub names its model's folder on its command line."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    for word in text.split():
        if "/repos/" in word:
            return word.split("/repos/", 1)[1][:80]
    return text[:80]


def gpu_memory() -> dict[str, Any]:
    """The GPU's used memory and each process's share (MiB), as nvidia-smi reports them."""
    total = smi("--query-gpu=memory.used,memory.total")
    apps = smi("--query-compute-apps=pid,used_memory")
    rows = []
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            rows.append({"pid": parts[0], "what": _process_name(parts[0]), "used": parts[1]})
    return {"gpu": total, "processes": rows}


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return float(w * h / union) if union > 0 else 0.0


def compare(ref: dict[str, Any], served: dict[str, np.ndarray]) -> dict[str, Any]:
    """Same boxes? Matched: same class and IoU >= 0.9, greedily in the reference's score order."""
    n = int(served[NUM_DETECTIONS].ravel()[0])
    boxes, scores, classes = served[BOXES][0][:n], served[SCORES][0][:n], served[CLASSES][0][:n]
    free = list(range(n))
    matched, score_diff, worst_iou = 0, 0.0, 1.0
    for box, score, cls in zip(ref["boxes"], ref["scores"], ref["classes"], strict=True):
        best = max(free, key=lambda j: _iou(box, boxes[j]), default=None)
        if best is not None and classes[best] == cls and _iou(box, boxes[best]) >= IOU_MATCH:
            matched += 1
            score_diff = max(score_diff, abs(float(score) - float(scores[best])))
            worst_iou = min(worst_iou, _iou(box, boxes[best]))
            free.remove(best)
    return {"ref": ref["n"], "served": n, "matched": matched, "max_score_diff": round(score_diff, 6),
            "min_iou": round(worst_iou, 4)}


def detections(client: TritonHttp, named: dict[str, bytes], reference: dict[str, Any],
               names: Sequence[str]) -> dict[str, Any]:
    """Every ensemble on every image, one image per request, against the CPU path's detections."""
    result: dict[str, Any] = {}
    for name in names:
        totals: dict[str, Any] = {"images": 0, "ref_boxes": 0, "served_boxes": 0, "matched": 0,
                                  "max_score_diff": 0.0, "min_iou": 1.0, "errors": []}
        rows = {}
        for image, data in named.items():
            try:
                row = compare(reference[name][image], client.infer(name, [data]))
            except (InferError, KeyError) as exc:
                totals["errors"].append(f"{image}: {exc}")
                continue
            rows[image] = row
            totals["images"] += 1
            totals["ref_boxes"] += row["ref"]
            totals["served_boxes"] += row["served"]
            totals["matched"] += row["matched"]
            totals["max_score_diff"] = max(totals["max_score_diff"], row["max_score_diff"])
            totals["min_iou"] = min(totals["min_iou"], row["min_iou"])
        result[name] = {"totals": totals, "images": rows}
    return result


def infer_tensor(client: TritonHttp, model: str, name: str, array: np.ndarray,
                 outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """One request straight to a detector: a UINT8 tensor in, its outputs back (binary tensor extension)."""
    payload = np.ascontiguousarray(array).tobytes()
    header = json.dumps({
        "inputs": [{"name": name, "shape": list(array.shape), "datatype": "UINT8",
                    "parameters": {"binary_data_size": len(payload)}}],
        **({"outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs]} if outputs else {}),
        "parameters": {"binary_data_output": True},  # every output as raw bytes, not JSON numbers
    }).encode()
    status, data, headers = client.request("POST", f"/v2/models/{model}/infer", header + payload, {
        "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
    if status != 200:
        raise InferError(json.loads(data).get("error", data.decode(errors="replace")))
    length = headers.get("inference-header-content-length")
    if length is None:  # a JSON-only answer: outputs were not asked for as binary
        body = json.loads(data)
        return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in body["outputs"]}
    return decode_response(data, int(length))


def input_size(client: TritonHttp, ensemble: str) -> tuple[int, int]:
    parameters = client.json(f"/v2/models/{ensemble}_preprocess/config")["parameters"]
    return int(parameters["input_height"]["string_value"]), int(parameters["input_width"]["string_value"])


def head_row(served: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """Served head vs CPU head of one image: boxes (rows 0-3, input pixels), scores (row 4), classes (row 5)."""
    boxes = np.abs(served[:4] - ref[:4])
    score = np.abs(served[4] - ref[4])
    strong = ref[4] >= max(0.05, float(ref[4].max()) * 0.5)  # anchors whose class matters
    return {"max_box_diff_px": round(float(boxes.max()), 4), "mean_box_diff_px": round(float(boxes.mean()), 5),
            "max_score_diff": round(float(score.max()), 6), "ref_max_score": round(float(ref[4].max()), 6),
            "strong_anchors": int(strong.sum()),
            "strong_class_agree": int((served[5][strong] == ref[5][strong]).sum())}


def heads(client: TritonHttp, named: dict[str, bytes], reference: dict[str, Any],
          kept: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, Any]:
    """Each detector's whole head on the CPU-preprocessed first scenes, against the head the CPU provider gave."""
    from generator.serving.batch import prepare_batch

    result: dict[str, Any] = {}
    for name in names:
        if CASES[name].options.get("nms_in_graph"):
            continue
        rows = {}
        size = input_size(client, name)
        for image in list(named)[:HEAD_IMAGES]:
            ref = kept[f"{name}/{image}"]
            batch = prepare_batch([named[image]], size)
            same_input = tensor_digest(batch.images, batch.letterbox) == reference[name][image]["input_sha256"]
            model = f"{name}_detector"
            inputs = client.json(f"/v2/models/{model}")["inputs"][0]["name"]
            (served,) = infer_tensor(client, model, inputs, batch.images).values()
            rows[image] = {**head_row(served[0], ref), "same_input_as_reference": same_input}
        result[name] = rows
    return result


def hostile(url: str, good: bytes, ensembles: Sequence[str]) -> dict[str, Any]:
    """Each bad image alone (the CPU path's message, then a valid request), then mixed with good ones at once."""
    from generator.serving.batch import prepare_batch
    from tests.fixtures.image_corpus import bad_images

    client = TritonHttp(url)
    bad = bad_images()
    result: dict[str, Any] = {}
    for name in ensembles:
        rows = {}
        size = input_size(client, name)
        for label, data in bad.items():
            expected = prepare_batch([data], size).errors.get(0, "accepted by the CPU path")
            try:
                client.infer(name, [data])
                message = "accepted"
            except InferError as exc:
                message = str(exc)
            after = client.infer(name, [good])
            rows[label] = {"message": message, "cpu_path_reason_in_message": expected in message,
                           "next_valid_ok": int(after[NUM_DETECTIONS].ravel()[0]) >= 0}
        result[name] = {"alone": rows, "in_flight_together": _mixed(url, name, list(bad.values()), good)}
    return result


def _mixed(url: str, name: str, bad: list[bytes], good: bytes) -> dict[str, int]:
    mixed = [good if i % 2 else data for i, data in enumerate(bad * 2)]

    def one(data: bytes) -> bool:
        try:
            TritonHttp(url).infer(name, [data])
            return True
        except InferError:
            return False

    with ThreadPoolExecutor(len(mixed)) as pool:
        ok = list(pool.map(one, mixed))
    return {"good_sent": len(mixed) // 2, "good_ok": sum(ok[1::2]), "bad_failed": sum(not o for o in ok[0::2])}


def models_ready(client: TritonHttp) -> dict[str, str]:
    """Every model's state (the server keeps serving the others when one fails to load)."""
    status, data, _ = client.request("POST", "/v2/repository/index", b"{}")
    if status != 200:
        return {"error": f"HTTP {status}"}
    return {m["name"]: m.get("state", "?") + (f": {m['reason']}" if m.get("reason") else "") for m in json.loads(data)}


def log_lines(log: Path, needles: Sequence[str] = ("detector: CUDA provider", "error", "Error", "failed")) -> list[str]:
    """The server log's lines about the detectors' provider and anything that went wrong (at most 60)."""
    if not log.exists():
        return []
    lines = [line for line in log.read_text(errors="replace").splitlines() if any(n in line for n in needles)]
    return lines[:60]

