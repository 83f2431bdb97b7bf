"""The rendered alert rules fired by ``promtool test rules`` on series taken from the real embedded server.

Two phases of real traffic go through the shared test server: normal (good scenes) and degraded (blank frames,
so the model sees nothing, plus bad images). The counters each phase added, and the p95 Triton reported, are
scraped from its metrics endpoint and replayed as promtool input series, one phase's increments per minute:
90 minutes normal, then 20 degraded. promtool then evaluates the very rule file deploy renders. Time is the one
thing synthesised: Prometheus' windows (5 min, 1 h) cannot be waited out in a test.

The watchdog's and the GPU rules get series of their own: the watchdog's from its real exposition code, the
GPU's written by hand with Triton's metric names (this machine has no GPU).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tritonclient.utils import InferenceServerException

from deploy.render.alerts import rule_groups
from deploy.settings import Settings, apply_overrides
from generator.server.gpu_metrics import GpuMonitor
from generator.server.watchdog import WatchdogMetrics
from generator.synthetic import encode
from loadtest.metrics import Sample, parse_prometheus, scrape
from tests.integration.helpers import infer, scene_bytes

pytestmark = pytest.mark.integration

NORMAL_MIN, DEGRADED_MIN = 90, 20
COUNTERS = ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_queue_duration_us",
            "ensemble_empty_outputs_total", "ensemble_images_total")
P95 = "nv_inference_request_summary_us"
Key = tuple[str, tuple[tuple[str, str], ...]]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: `apt-get install prometheus` (.ci/run installs it)")
    return path


def snapshot(metrics_url: str) -> dict[Key, float]:
    """The series the serving and quality rules read, of the demo ensemble and its steps."""
    wanted: list[Sample] = [s for s in parse_prometheus(scrape(metrics_url))
                            if s.labels.get("model", "").startswith("yolo") and "static" not in s.labels["model"]
                            and (s.name in COUNTERS or (s.name == P95 and s.labels.get("quantile") == "0.95"))]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in wanted}


def send(server: Any, images: list[bytes]) -> None:
    def one(image: bytes) -> None:
        with contextlib.suppress(InferenceServerException):  # a bad image's failure is what the rule counts
            infer(server, server.model_name, [image])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, images))


def series_text(key: Key) -> str:
    name, labels = key
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def replay(start: dict[Key, float], normal: dict[Key, float], degraded: dict[Key, float]) -> list[dict[str, str]]:
    """promtool input series: counters grow by each phase's real increment per minute; the p95 holds its value."""
    series = []
    for key, v0 in start.items():
        if key[0] == P95:
            a, b = normal[key], degraded[key]
            values = f"{a:g}+0x{NORMAL_MIN} {b:g}+0x{DEGRADED_MIN}"
        else:
            da, db = normal[key] - v0, degraded[key] - normal[key]
            mid = v0 + NORMAL_MIN * da
            values = f"{v0:g}+{da:g}x{NORMAL_MIN} {mid + db:g}+{db:g}x{DEGRADED_MIN - 1}"
        series.append({"series": series_text(key), "values": values})
    return series


def write_rules(path: Path, settings: Settings) -> None:
    """The rule file deploy renders, without annotations (their text carries the value; not what is tested)."""
    groups = rule_groups(settings)
    for rule in groups[0]["rules"]:
        rule.pop("annotations")
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))


def firing(name: str, **labels: str) -> dict[str, Any]:
    severity = "critical" if name == "TritonEnsembleErrorRate" else "warning"
    return {"exp_labels": {"severity": severity, **labels}}


def run_promtool(tmp_path: Path, rules: str, tests: list[dict[str, Any]]) -> None:
    test_file = tmp_path / f"{Path(rules).stem}_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [rules], "evaluation_interval": "1m", "tests": tests},
                                        sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", str(test_file)], capture_output=True, text=True,
                            check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def alert_test(series: list[dict[str, str]], expected: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": at, "alertname": name, "exp_alerts": alerts} for (at, name), alerts in expected.items()]}


NMS_IMAGES: Key = ("ensemble_images_total", (("model", "yolo_nms"), ("version", "1")))


def settled(metrics_url: str, images: float) -> dict[Key, float]:
    """A snapshot once the NMS step has published ``images`` (the steps publish once a second)."""
    deadline = time.monotonic() + 15
    while (values := snapshot(metrics_url))[NMS_IMAGES] < images and time.monotonic() < deadline:
        time.sleep(0.2)
    return values


@pytest.fixture(scope="module")
def real_phases(triton_server) -> tuple[dict[Key, float], dict[Key, float], dict[Key, float]]:
    start = settled(triton_server.metrics_url, 0)
    send(triton_server, [scene_bytes(60 + i, 640, 480) for i in range(16)])
    normal = settled(triton_server.metrics_url, start[NMS_IMAGES] + 16)
    blank = encode(np.full((480, 640, 3), 114, dtype=np.uint8))
    send(triton_server, [blank] * 12 + [b"", b"not an image" * 4] * 2)
    degraded = settled(triton_server.metrics_url, normal[NMS_IMAGES] + 12)
    return start, normal, degraded


# The replay sends each phase's requests once a minute (16 and 12 images): a traffic floor under that lets the
# rules judge it; the default floor (alert_min_per_minute 60) holds them silent (the test after this one).
REPLAY_FLOOR = {"alert_min_per_minute": "10"}


def test_serving_and_quality_alerts_fire_on_the_degraded_phase_only(real_phases, tmp_path: Path) -> None:
    start, normal, degraded = real_phases
    assert normal[NMS_IMAGES] - start[NMS_IMAGES] == 16 and degraded[NMS_IMAGES] - normal[NMS_IMAGES] == 12
    write_rules(tmp_path / "alerts.yml", apply_overrides(Settings(), REPLAY_FLOOR))
    series = replay(start, normal, degraded)
    during_normal, during_degraded = f"{NORMAL_MIN - 5}m", f"{NORMAL_MIN + DEGRADED_MIN - 1}m"
    run_promtool(tmp_path, "alerts.yml", [alert_test(series, {
        (during_normal, "TritonEnsembleErrorRate"): [],
        (during_normal, "EnsembleEmptyOutputShareJump"): [],
        (during_degraded, "TritonEnsembleErrorRate"): [firing("TritonEnsembleErrorRate")],
        (during_degraded, "EnsembleEmptyOutputShareJump"): [firing("EnsembleEmptyOutputShareJump")],
    })])


def test_below_the_traffic_floor_no_ratio_or_latency_alert_fires(real_phases, tmp_path: Path) -> None:
    """The same degraded phase at 12-16 requests a minute, under the default floor of 60: nothing fires, however bad
    the share or the latency (issue 37: an idle server's probes fed the empty-output alert)."""
    start, normal, degraded = real_phases
    tight = {"latency_sla_p95_ms": "1", "alert_queue_ms": "1"}
    assert int(Settings().alert_min_per_minute) > normal[NMS_IMAGES] - start[NMS_IMAGES]
    write_rules(tmp_path / "floor.yml", apply_overrides(Settings(), tight))
    at = f"{NORMAL_MIN + DEGRADED_MIN - 1}m"
    run_promtool(tmp_path, "floor.yml", [alert_test(replay(start, normal, degraded), {
        (at, name): [] for name in ("TritonEnsembleErrorRate", "EnsembleEmptyOutputShareJump",
                                    "TritonEnsembleLatencyP95OverSla", "TritonEnsembleQueueTime")})])
    write_rules(tmp_path / "low.yml", apply_overrides(Settings(), {**tight, **REPLAY_FLOOR}))
    run_promtool(tmp_path, "low.yml", [alert_test(replay(start, normal, degraded), {
        (at, name): [firing(name)] for name in ("TritonEnsembleErrorRate", "EnsembleEmptyOutputShareJump",
                                                "TritonEnsembleLatencyP95OverSla", "TritonEnsembleQueueTime")})])


def test_latency_and_queue_alerts_fire_above_their_thresholds_only(real_phases, tmp_path: Path) -> None:
    """Thresholds around what this machine measured: half of it fires, twice it does not."""
    start, normal, degraded = real_phases
    p95_key = next(k for k in normal if k[0] == P95 and ("model", "yolo") in k[1])
    p95_ms = min(normal[p95_key], degraded[p95_key]) / 1000
    queue_us = sum(normal[k] - start[k] for k in start if k[0] == "nv_inference_queue_duration_us"
                   and dict(k[1])["model"] in ("yolo_preprocess", "yolo_detector", "yolo_nms"))
    success = ("nv_inference_request_success", (("model", "yolo"), ("version", "1")))
    queue_ms = queue_us / (normal[success] - start[success]) / 1000
    assert p95_ms >= 2 and queue_ms >= 2, f"too fast to test the thresholds: p95 {p95_ms} ms, queue {queue_ms} ms"
    high = max(normal[p95_key], degraded[p95_key]) / 1000
    tight = {"latency_sla_p95_ms": str(int(p95_ms / 2)), "alert_queue_ms": str(int(queue_ms / 2)), **REPLAY_FLOOR}
    loose = {"latency_sla_p95_ms": str(int(high * 2) + 1), "alert_queue_ms": str(int(queue_ms * 2) + 1),
             **REPLAY_FLOOR}
    write_rules(tmp_path / "tight.yml", apply_overrides(Settings(), tight))
    write_rules(tmp_path / "loose.yml", apply_overrides(Settings(), loose))
    series = replay(start, normal, degraded)
    at = f"{NORMAL_MIN - 5}m"
    run_promtool(tmp_path, "tight.yml", [alert_test(series, {
        (at, "TritonEnsembleLatencyP95OverSla"): [firing("TritonEnsembleLatencyP95OverSla")],
        (at, "TritonEnsembleQueueTime"): [firing("TritonEnsembleQueueTime")],
    })])
    run_promtool(tmp_path, "loose.yml", [alert_test(series, {
        (at, "TritonEnsembleLatencyP95OverSla"): [],
        (at, "TritonEnsembleQueueTime"): [],
    })])


def test_watchdog_restart_alert(tmp_path: Path) -> None:
    metrics = WatchdogMetrics()
    before = {s.name + str(sorted(s.labels.items())): s for s in parse_prometheus(metrics.render())}
    metrics.count(restart="dead_stub")
    after = {s.name + str(sorted(s.labels.items())): s for s in parse_prometheus(metrics.render())}
    restart_series = []
    for key, sample in after.items():
        if sample.name == "triton_watchdog_restarts_total":
            v0, v1 = before[key].value, sample.value
            restart_series.append({"series": series_text((sample.name, tuple(sorted(sample.labels.items())))),
                                   "values": f"{v0:g}x30 {v1:g}x30"})
    write_rules(tmp_path / "alerts.yml", Settings())
    run_promtool(tmp_path, "alerts.yml", [alert_test(restart_series, {
        ("20m", "TritonStubRestarted"): [],
        ("35m", "TritonStubRestarted"): [firing("TritonStubRestarted", reason="dead_stub")],
        ("50m", "TritonStubRestarted"): [],
    })])


def exporter_phases() -> list[dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """The GPU exporter's real series (generator/server/gpu_metrics.py) over a fake NVML, one scrape per phase:
    idle, busy and cool, busy and hot (thermal and power throttling, memory at 96 %)."""
    from tests.generator.server.test_gpu_metrics import FakeGpu, fake_nvml, values

    gpu = FakeGpu("GPU-0", used=30 * 2**30, total=141 * 2**30, util=2, power_mw=90_000, reasons=0x1)
    monitor = GpuMonitor(fake_nvml([gpu]))
    phases = [values(monitor.render())]
    gpu.util, gpu.power_mw, gpu.reasons, gpu.used = 99, 520_000, 0x0, 80 * 2**30
    phases.append(values(monitor.render()))
    gpu.power_mw, gpu.reasons, gpu.used = 699_000, 0x4 | 0x40, 136 * 2**30
    phases.append(values(monitor.render()))
    return phases


def test_gpu_alerts_fire_on_the_exporters_series(tmp_path: Path) -> None:
    """30 min idle, 30 min busy and cool with the p95 flat, 30 min busy and hot while the p95 triples."""
    idle, busy, hot = exporter_phases()
    series = []
    for key in idle:
        if key[0] in ("gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
                      "gpu_power_watts", "gpu_power_limit_watts", "gpu_throttled"):
            series.append({"series": series_text(key), "values": f"{idle[key]:.17g}x30 {busy[key]:.17g}x30 "
                                                                  f"{hot[key]:.17g}x30"})
    p95 = 'nv_inference_request_summary_us{model="yolo",quantile="0.95"}'
    series.append({"series": p95, "values": "40000x30 40000x30 120000x30"})
    write_rules(tmp_path / "alerts.yml", Settings())
    uuid = {"uuid": "GPU-0"}
    thermal = {"exp_labels": {"severity": "critical", **uuid}}
    run_promtool(tmp_path, "alerts.yml", [alert_test(series, {
        ("25m", "GpuThermalThrottling"): [], ("55m", "GpuThermalThrottling"): [],
        ("85m", "GpuThermalThrottling"): [thermal],
        ("55m", "GpuPowerThrottling"): [], ("85m", "GpuPowerThrottling"): [firing("GpuPowerThrottling", **uuid)],
        ("55m", "GpuMemoryNearFull"): [], ("85m", "GpuMemoryNearFull"): [firing("GpuMemoryNearFull", **uuid)],
        ("55m", "GpuSaturatedLatencyRising"): [],
        ("85m", "GpuSaturatedLatencyRising"): [{"exp_labels": {"severity": "warning", "gpu": "0", **uuid}}],
    })])
