"""The quality histograms re-exported by the watchdog: one TYPE histogram family each, promtool-clean, the same
samples as Triton's counter parts; Prometheus' job of Triton's endpoint drops exactly those parts."""

from __future__ import annotations

import http.server
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from generator.server import histogram_export
from generator.server.histogram_export import DROP_REGEX, HISTOGRAMS, reexport
from generator.serving import telemetry
from generator.serving.contract import DETECTIONS_BUCKETS, DETECTIONS_METRIC, SCORE_BUCKETS, SCORE_METRIC

REPO = Path(__file__).resolve().parents[3]


def triton_exposition() -> str:
    """What Triton 2.51 writes for the NMS step's counters of two models: one TYPE counter family per series name
    (the Python backend's COUNTER kind), the le labels in the order the step registered them, and a counter of
    its own beside them."""
    families: dict[str, list[str]] = {}
    rng = np.random.default_rng(3)
    for model in ("yolo_nms", "candidate_nms"):
        counts = telemetry.output_counts(rng.integers(0, 9, size=(40, 1)), rng.random((40, 100)), 100)
        for (name, labels), value in counts.items():
            text = ",".join(f'{k}="{v}"' for k, v in (*labels, ("model", model), ("version", "1")))
            families.setdefault(name, []).append(f"{name}{{{text}}} {value:g}")
    lines = []
    for name, samples in families.items():
        lines += [f"# HELP {name} {telemetry.family_help(name)}", f"# TYPE {name} counter", *samples]
    return "\n".join(lines) + "\n"


def promtool_problems(text: str) -> list[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `apt-get install prometheus` (.ci/run installs it)")
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if match and re.fullmatch(DROP_REGEX, match[1]):
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match[2]))
            found[(match[1], labels)] = float(match[3])
    return found


def test_the_names_are_the_contracts() -> None:
    assert set(HISTOGRAMS) == {DETECTIONS_METRIC, SCORE_METRIC}
    assert all(HISTOGRAMS[name] == telemetry.HELP[name] for name in HISTOGRAMS)


def test_triton_s_counter_parts_fail_promtool_and_the_reexport_passes_with_the_same_samples() -> None:
    triton = triton_exposition()
    assert any("non-histogram metrics should not have \"_bucket\" suffix" in p for p in promtool_problems(triton))
    histograms = reexport(triton)
    assert promtool_problems(histograms) == []
    assert histograms.count("# TYPE") == 2 and histograms.count(" histogram\n") == 2
    assert samples(histograms) == samples(triton)
    per_model = (len(DETECTIONS_BUCKETS) + 3) + (len(SCORE_BUCKETS) + 3)  # bounds, +Inf, sum and count
    assert len(samples(histograms)) == 2 * per_model


def test_buckets_come_in_le_order_with_sum_and_count_after_them() -> None:
    lines = [line for line in reexport(triton_exposition()).splitlines()
             if line.startswith(DETECTIONS_METRIC) and 'model="yolo_nms"' in line]
    les = [re.search(r'le="([^"]+)"', line)[1] for line in lines[:-2]]  # type: ignore[index]
    assert les == [telemetry.bucket_label(b) for b in (*DETECTIONS_BUCKETS, float("inf"))]
    assert lines[-2].startswith(f"{DETECTIONS_METRIC}_sum{{") and lines[-1].startswith(f"{DETECTIONS_METRIC}_count{{")


def test_nothing_to_reexport_is_nothing() -> None:
    assert reexport("") == ""
    assert reexport("# TYPE ensemble_images_total counter\nensemble_images_total{model=\"m\"} 3\n") == ""


@pytest.mark.parametrize("name, dropped", [
    (f"{DETECTIONS_METRIC}_bucket", True), (f"{SCORE_METRIC}_sum", True), (f"{SCORE_METRIC}_count", True),
    ("ensemble_images_total", False), ("ensemble_empty_outputs_total", False), (f"{SCORE_METRIC}_bucket_x", False),
    ("nv_inference_request_success", False),
])
def test_the_drop_rule_matches_the_reexported_parts_only(name: str, dropped: bool) -> None:
    # Prometheus anchors a relabel regex at both ends, as fullmatch does.
    assert bool(re.fullmatch(DROP_REGEX, name)) is dropped


def test_both_scrape_configs_drop_the_parts_from_triton_s_job() -> None:
    assert f'regex: "{DROP_REGEX}"' in (REPO / "deploy/monitoring/prometheus/prometheus.yml").read_text()
    assert f'regex: "{DROP_REGEX}"' in (REPO / "deploy/k8s/servicemonitor.yaml").read_text()


@pytest.mark.parametrize("command, port", [
    (["tritonserver", "--model-repository=/m"], 8002),
    (["tritonserver", "--metrics-port=9102", "--metrics-address=127.0.0.1"], 9102),
    (["tritonserver", "--allow-metrics=false"], None),
])
def test_the_metrics_port_comes_from_the_server_command(command: list[str], port: int | None) -> None:
    assert histogram_export.metrics_port(command) == port


@pytest.fixture
def triton_metrics() -> Iterator[int]:
    body = triton_exposition().encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_watchdog_endpoint_serves_the_histograms_read_from_triton(triton_metrics: int) -> None:
    from generator.server import watchdog

    extra = watchdog.histogram_series(["tritonserver", f"--metrics-port={triton_metrics}"])
    assert extra is not None
    server = watchdog.serve_metrics(watchdog.WatchdogMetrics(), "127.0.0.1", 0, extra)
    try:
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert f"# TYPE {DETECTIONS_METRIC} histogram" in text and f"# TYPE {SCORE_METRIC} histogram" in text
    assert samples(text) == samples(triton_exposition())
    assert [p for p in promtool_problems(text) if "ensemble_" in p] == []


def test_a_triton_that_does_not_answer_adds_nothing() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused
        assert histogram_export.histograms_of(int(unused.getsockname()[1])) == ""
