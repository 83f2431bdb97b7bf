"""A real Prometheus (Debian's, on the local base; the pinned prom/prometheus for users) scrapes Triton, the
ensemble's quality metrics and the watchdog through the pod's alias, and has the alert rules loaded."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from deploy.render.alerts import rule_groups
from deploy.settings import Settings
from generator.server.histogram_export import DROP_REGEX
from generator.serving.contract import DETECTIONS_METRIC, IMAGES_METRIC, SCORE_METRIC

from .conftest import LiveStack

pytestmark = [pytest.mark.live]

JOBS = {"triton", "triton-watchdog", "prometheus"}
SCRAPE_WAIT_S = 90.0  # the scrape interval is 15 s


def _api(stack: LiveStack, path: str, **query: str) -> Any:
    url = f"{stack.endpoints['prometheus']}/api/v1/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]


def _eventually(what: str, check: Any) -> Any:
    deadline, last = time.monotonic() + SCRAPE_WAIT_S, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"{what} within {SCRAPE_WAIT_S:.0f} s: last answer {last!r}")


def test_prometheus_has_its_three_targets_up(stack: LiveStack) -> None:
    def targets() -> dict[str, str] | None:
        found = {t["labels"]["job"]: t["health"] for t in _api(stack, "targets")["activeTargets"]}
        return found if set(found) == JOBS and set(found.values()) == {"up"} else None

    assert _eventually("all three targets up", targets) == dict.fromkeys(JOBS, "up")


def test_the_alert_rules_are_loaded(stack: LiveStack) -> None:
    wanted = {rule["alert"] for group in rule_groups(Settings()) for rule in group["rules"]}
    loaded = {rule["name"]: rule["health"] for group in _api(stack, "rules")["groups"] for rule in group["rules"]}
    assert {"TritonEnsembleErrorRate", "GpuThermalThrottling"} <= wanted  # the serving and the GPU rules
    assert set(loaded) == wanted
    assert set(loaded.values()) <= {"ok", "unknown"}  # "unknown" until first evaluated; never "err"


def test_quality_and_watchdog_metrics_are_queryable(stack: LiveStack, scenes: list[bytes]) -> None:
    with stack.client("grpcs") as client:
        client.detect_many(scenes)

    def series(query: str) -> list[dict[str, Any]]:
        return list(_api(stack, "query", query=query)["result"])

    # One series per Python model instance: their sum counts every image.
    images = _eventually("the ensemble's image counter",
                         lambda: [s for s in series(f'sum({IMAGES_METRIC}{{model=~"yolo(_v[0-9]+)?_nms"}})')
                                  if float(s["value"][1]) >= len(scenes)])
    assert float(images[0]["value"][1]) >= len(scenes)
    # The histograms come from the watchdog's job (histogram_export.py), scraped on its own clock: the image
    # counter above can be in Prometheus a scrape before the detections histogram is.
    counts = _eventually("the ensemble's detections histogram (watchdog job)",
                         lambda: [s for s in series(f'sum({DETECTIONS_METRIC}_count{{model=~"yolo(_v[0-9]+)?_nms"}})')
                                  if float(s["value"][1]) >= len(scenes)])
    assert float(counts[0]["value"][1]) >= len(scenes)
    starts = series('triton_watchdog_server_starts_total{job="triton-watchdog"}')
    assert starts and float(starts[0]["value"][1]) >= 1
    assert series('nv_inference_request_success{job="triton",model="yolo"}')


def _scrape_inside(stack: LiveStack, port: int) -> str:
    """A metrics endpoint of the Triton container, read inside it (Triton's port is not published on the host)."""
    read = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
            f"'http://127.0.0.1:{port}/metrics', timeout=10).read().decode())")
    answer = stack.exec("triton-cpu", "python3", "-c", read)
    assert answer.returncode == 0, answer.stderr
    return answer.stdout


def _as_prometheus_keeps(text: str) -> str:
    """Triton's exposition less the lines of the families its Prometheus job drops (the histograms' parts)."""
    def name(line: str) -> str:
        words = line.split()
        return words[2] if line.startswith("#") and len(words) > 2 else re.split(r"[{\s]", line, maxsplit=1)[0]

    return "\n".join(line for line in text.splitlines() if not re.fullmatch(DROP_REGEX, name(line))) + "\n"


def _promtool_on_ensemble(text: str) -> list[str]:
    """What ``promtool check metrics`` says about the project's own families (Triton's nv_* are not ours)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed: `apt-get install prometheus` (.ci/run installs it)"
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    return [line for line in (result.stdout + result.stderr).splitlines() if "ensemble_" in line]


def test_the_ensemble_histograms_are_histograms_on_every_scrape(stack: LiveStack, scenes: list[bytes]) -> None:
    """promtool is clean for the ensemble's families on both scrapes as Prometheus keeps them: Triton's endpoint
    less the counter parts its job drops, and the watchdog's, which serves them as histograms; Prometheus stores
    the histograms from the watchdog's job only."""
    with stack.client("grpcs") as client:
        client.detect_many(scenes)
    settings = Settings()
    triton = _scrape_inside(stack, settings.metrics_port)
    kept = _as_prometheus_keeps(triton)
    watchdog = _scrape_inside(stack, settings.watchdog_metrics_port)
    assert f"{DETECTIONS_METRIC}_bucket{{" in triton  # the rollout still reads the counter parts there
    assert f"# TYPE {DETECTIONS_METRIC} histogram" in watchdog and f"# TYPE {SCORE_METRIC} histogram" in watchdog
    assert "ensemble_" in kept and _promtool_on_ensemble(kept) == []
    assert _promtool_on_ensemble(watchdog) == []
    jobs = _eventually("the histogram's buckets in Prometheus", lambda: {
        s["metric"]["job"] for s in _api(stack, "query", query=f"{DETECTIONS_METRIC}_bucket")["result"]})
    assert jobs == {"triton-watchdog"}
