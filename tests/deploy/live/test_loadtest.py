"""Locust master and two workers in their own containers (the compose `loadtest` services), headless, through the
proxy with the stack's CA: a clean run under the SLA gate, and misconfigured stacks reported by cause, with
back-off and no worker crash.

The run's options go in a compose override (``headless``) on top of the committed file, like an operator's.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.settings import Settings

from .conftest import LiveStack, docker

pytestmark = [pytest.mark.live]

# The reference load on a 2-core machine that also runs Locust: four closed-loop users, the default corpus
# (640x480, 1280x720 and 1920x1080 scenes). The SLA gate is the stack's own: the latency budget its build
# recorded (manifest.json "admission"; derived from the service time the builder measured, or --max-queue-ms),
# within which the queues admit only what the stack serves. The deployment's alert threshold on Triton's own p95
# (latency_sla_p95_ms) is printed beside it.
USERS = 4
THINK_MS = 0
SIZES = "640x480,1280x720,1920x1080"
RUN_TIME_S = 60
MISCONFIGURED_S = 20
MISCONFIGURED_USERS = 4


def headless(folder: Path, host: str, users: int, run_time_s: int, sla_ms: float | None, think_ms: int = 0) -> Path:
    """A compose override: the master runs headless for ``run_time_s`` and writes CSV, HTML and run facts to a
    folder of this machine (writable by the containers' uid)."""
    results = folder / "results"
    results.mkdir()
    os.chown(results, Settings().run_as_uid, Settings().run_as_gid)
    gate = [f"--triton-sla-p95-ms={sla_ms:g}", "--triton-max-fail-ratio=0"] if sla_ms is not None else []
    master = [
        "GrpcDetectionUser", "--master", f"--host={host}", "--expect-workers=2", "--expect-workers-max-wait=120",
        "--headless", f"--users={users}", f"--spawn-rate={users}", f"--run-time={run_time_s}s",
        "--stop-timeout=15", "--csv=/results/locust", "--csv-full-history", "--html=/results/report.html",
        "--only-summary", "--triton-runinfo=/results/runinfo.json", f"--master-bind-port={Settings().locust_master_port}",
        *gate,
    ]
    load = {"LOADTEST_THINK_MS": str(think_ms), "LOADTEST_SIZES": SIZES}  # read by the users in every process
    override = {"services": {
        "locust-master": {"command": master, "environment": load,
                          "volumes": [{"type": "bind", "source": str(results), "target": "/results"}]},
        "locust-worker": {"environment": load},
    }}
    path = folder / "headless.yml"
    path.write_text(yaml.safe_dump(override))
    return path


def run_locust(stack: LiveStack, override: Path) -> tuple[int, list[int], Path]:
    """Start the master and its workers, wait for the master; (its exit code, the workers', the results)."""
    stack.compose("rm", "--force", "--stop", "locust-master", "locust-worker", files=(override,))
    stack.compose("up", "--detach", "--no-build", "locust-master", "locust-worker", files=(override,), timeout_s=300)
    master = stack.container("locust-master")
    code = int(docker("wait", master, timeout_s=600).stdout.strip())
    workers = stack.compose("ps", "--all", "-q", "locust-worker").stdout.split()
    worker_codes = [int(docker("wait", w, timeout_s=120).stdout.strip()) for w in workers]
    return code, worker_codes, override.parent / "results"


def totals(results: Path) -> dict[str, Any]:
    with (results / "locust_stats.csv").open() as f:
        (row,) = [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"]
    return row


def failures(results: Path) -> dict[str, int]:
    with (results / "locust_failures.csv").open() as f:
        return {r["Error"]: int(r["Occurrences"]) for r in csv.DictReader(f)}


@pytest.fixture(scope="module", autouse=True)
def loadtest_image(stack: LiveStack) -> None:
    stack.compose("build", "locust-master", timeout_s=1800)


def test_locust_in_containers_runs_through_the_proxy_with_no_failure(stack: LiveStack, tmp_path: Path) -> None:
    manifest = stack.stable_manifest()
    budget_ms = float(manifest["admission"]["max_queue_ms"])
    override = headless(tmp_path, "grpcs://triton:8444", USERS, RUN_TIME_S, sla_ms=budget_ms, think_ms=THINK_MS)
    code, workers, results = run_locust(stack, override)
    info = json.loads((results / "runinfo.json").read_text())
    row = totals(results)
    print(f"\nLocust {USERS} users ({SIZES}, {THINK_MS} ms think time), {RUN_TIME_S} s, master + 2 workers in containers, through the proxy: "
          f"{row['Request Count']} requests, {row['Failure Count']} failures, p50 {info['p50_ms']} ms, "
          f"p95 {info['p95_ms']} ms, p99 {info['p99_ms']} ms; SLA (the build's budget) p95 {budget_ms:.0f} ms: "
          f"{info['breaches'] or 'met'}; the alert threshold on Triton's p95 is {Settings().latency_sla_p95_ms} ms")
    assert (results / "report.html").stat().st_size > 0 and (results / "locust_stats_history.csv").is_file()
    assert info["workers"] == 2 and workers == [0, 0]
    assert int(row["Request Count"]) > USERS * RUN_TIME_S and int(row["Failure Count"]) == 0
    assert code == 0 and info["breaches"] == [], info["breaches"]  # the SLA gate: p95 and failure ratio


@pytest.mark.parametrize(("case", "host", "cause"), [
    ("a certificate that does not name the host", "grpcs://pod:8444",
     "the server's certificate does not name pod"),
    ("the proxy down", "grpcs://triton:8444", "connection refused: nothing listens at triton:8444"),
])
def test_a_misconfigured_stack_is_reported_by_cause_with_back_off(stack: LiveStack, tmp_path: Path, case: str,
                                                                  host: str, cause: str) -> None:
    override = headless(tmp_path, host, MISCONFIGURED_USERS, MISCONFIGURED_S, sla_ms=None)
    if case == "the proxy down":
        stack.compose("stop", "proxy")
    try:
        code, workers, results = run_locust(stack, override)
    finally:
        stack.compose("start", "proxy")
    seen = failures(results)
    count = int(totals(results)["Failure Count"])
    rate = count / MISCONFIGURED_S / MISCONFIGURED_USERS
    print(f"\n{case}: {count} failures in {MISCONFIGURED_S} s with {MISCONFIGURED_USERS} users "
          f"({rate:.2f} per user per second): {seen}")
    assert seen and all(cause in error for error in seen), seen
    assert count > 0 and rate < 1.0  # backing off (0.1 s doubling to 5 s), not spinning
    assert workers == [0, 0] and code != 0  # no worker crashed; the master reports the failures
    stack.wait_serving(120)
