"""Faults against the live stack, after everything else (they break it and check that it heals): a killed stub, a
killed tritonserver, a broken ONNX given to the builder, the proxy restarted, the path behind the proxy broken,
and ten times the stack's capacity. Times are printed (``pytest -s``)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.proxy_admission import BUSY_MESSAGE
from generator.operate.rollout.window import Scrape, parse_scrape
from tests.integration.load import Outcome, Sender, percentile

from .conftest import LiveStack, probe_image

pytestmark = [pytest.mark.live]

HEAL_S = 60.0  # the bound for a killed stub
RESTART_S = 120.0  # a fresh container: restart policy, generator check, model load
BURST_S = 20.0
STEPS = ("preprocess", "detector", "nms")
# Triton's 0.99 summary quantile is kept within 0.001 of rank, and a step checks a request's timeout when it forms
# the batch that takes it, not when the batch starts: a step's queue p99 within a tenth over the budget.
QUEUE_SLACK = 1.10


def _restarts(stack: LiveStack, service: str) -> int:
    return int(stack.inspect(service, "{{.RestartCount}}"))


def _tritonserver(stack: LiveStack) -> int:
    """Host PID of the container's tritonserver (not the watchdog, whose arguments name it too)."""
    table = stack.host_pids("triton-cpu", "tritonserver")
    servers = [pid for pid in table if Path(f"/proc/{pid}/comm").read_text().strip() == "tritonserver"]
    assert len(servers) == 1, servers
    return servers[0]


def _wait(what: str, condition: object, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if condition():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def test_a_killed_stub_heals_in_place_within_a_minute(stack: LiveStack) -> None:
    restarts, server = _restarts(stack, "triton-cpu"), _tritonserver(stack)
    # The stable version's step: yolo_v<N>_preprocess (the stack serves a versioned repository).
    step = f"yolo_v{stack.index()['stable']}_preprocess"
    stubs = [pid for pid in stack.host_pids("triton-cpu", step)
             if Path(f"/proc/{pid}/comm").read_text().strip().startswith("triton_python")]
    assert stubs, "no preprocess stub found with docker top"
    for pid in stubs:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    _wait("a new tritonserver", lambda: _tritonserver_or_none(stack) not in (None, server), HEAL_S)
    healed = stack.wait_serving(HEAL_S, since=killed)
    print(f"\npreprocess stubs killed ({len(stubs)}) -> serving again through the proxy after {healed:.1f} s "
          "(tritonserver restarted in place by the watchdog)")
    assert healed < HEAL_S
    assert _restarts(stack, "triton-cpu") == restarts  # in place, not by the restart policy
    logs = stack.compose("logs", "--no-log-prefix", "triton-cpu")
    assert "restarting Triton" in logs.stdout + logs.stderr and step in logs.stdout + logs.stderr


def _tritonserver_or_none(stack: LiveStack) -> int | None:
    try:
        return _tritonserver(stack)
    except (AssertionError, OSError):
        return None


def test_a_killed_tritonserver_is_restarted_by_the_containers_policy(stack: LiveStack) -> None:
    restarts = _restarts(stack, "triton-cpu")
    os.kill(_tritonserver(stack), signal.SIGKILL)
    killed = time.monotonic()
    _wait("the restart policy", lambda: _restarts(stack, "triton-cpu") == restarts + 1, RESTART_S)
    healed = stack.wait_serving(RESTART_S, since=killed)
    print(f"\ntritonserver killed -> container restarted by its policy, serving again after {healed:.1f} s")
    assert _restarts(stack, "triton-cpu") == restarts + 1


def test_a_broken_onnx_fails_the_builder_and_the_previous_build_keeps_serving(stack: LiveStack,
                                                                             tmp_path: Path) -> None:
    before = stack.exec("triton-cpu", "readlink", "/models/current").stdout.strip()
    index = stack.index()
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an ONNX model")
    broken.chmod(0o644)
    result = stack.compose("run", "--rm", "--no-deps", "-v", f"{broken}:/opt/detector/model.onnx:ro", "builder-cpu",
                           check=False, timeout_s=600)
    said = result.stdout + result.stderr
    print(f"\nbroken ONNX -> builder exit {result.returncode}: {said.strip().splitlines()[-2:]}")
    assert result.returncode != 0
    assert "not a valid ONNX model" in said and "still holds the versions it held" in said
    assert stack.exec("triton-cpu", "readlink", "/models/current").stdout.strip() == before
    assert stack.index() == index  # no version added, the stable one unchanged
    assert stack.serving()


def test_a_restarted_proxy_serves_again_by_itself(stack: LiveStack) -> None:
    """The proxy and Triton share the pod's namespace: a new proxy joins it again (with Triton in the proxy's
    namespace it stranded Triton, 502 for every request while both reported healthy)."""
    triton_started = stack.inspect("triton-cpu", "{{.State.StartedAt}}")
    stack.compose("restart", "proxy")
    restarted = time.monotonic()
    healed = stack.wait_serving(HEAL_S, since=restarted)
    print(f"\nproxy restarted -> serving again after {healed:.1f} s, Triton untouched")
    assert stack.inspect("triton-cpu", "{{.State.StartedAt}}") == triton_started
    _wait("the proxy healthy", lambda: stack.inspect("proxy", "{{.State.Health.Status}}") == "healthy", HEAL_S)


def test_the_proxy_health_check_sees_a_broken_path(stack: LiveStack) -> None:
    """The proxy's own health check (the command compose gave it) reads Triton's readiness through nginx."""
    check = json.loads(stack.inspect("proxy", "{{json .Config.Healthcheck.Test}}"))[1:]
    assert stack.exec("proxy", *check).returncode == 0
    stack.compose("stop", "triton-cpu")
    try:
        broken = stack.exec("proxy", *check)
        assert broken.returncode != 0, "the proxy reported healthy with Triton gone"
    finally:
        stack.compose("start", "triton-cpu")
    stack.wait_serving(RESTART_S)
    assert stack.exec("proxy", *check).returncode == 0


def _metrics(stack: LiveStack) -> Scrape:
    """Triton's own metrics, read inside its container (the metrics port is not published on the host)."""
    read = ("import sys, urllib.request; "
            "sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:8002/metrics', timeout=10).read().decode())")
    answer = stack.exec("triton-cpu", "python3", "-c", read)
    assert answer.returncode == 0, answer.stderr
    return parse_scrape(answer.stdout)


def _per_step(scrape: Scrape, name: str, **labels: str) -> dict[str, list[float]]:
    """``name`` for each composing step, keyed by the step (one value per loaded version)."""
    found: dict[str, list[float]] = {}
    for (sample, sample_labels), value in scrape.items():
        tags = dict(sample_labels)
        step = next((s for s in STEPS if tags.get("model", "").endswith(f"_{s}")), None)
        if sample == name and step and all(tags.get(k) == v for k, v in labels.items()):
            found.setdefault(step, []).append(value)
    return found


def _delta(before: Scrape, after: Scrape, name: str) -> dict[str, float]:
    old = _per_step(before, name)
    return {step: sum(values) - sum(old.get(step, [])) for step, values in _per_step(after, name).items()}


def _queue_waits(before: Scrape, after: Scrape) -> tuple[dict[str, float], dict[str, float]]:
    """Each step's queue wait in ms over the burst, as Triton measured it: the mean of the requests it admitted
    (counters' difference) and the 0.99 quantile of its sliding window."""
    waited_us = _delta(before, after, "nv_inference_queue_duration_us")
    served = _delta(before, after, "nv_inference_request_success")
    means = {s: waited_us[s] / served[s] / 1000.0 for s in STEPS if served.get(s)}
    p99 = {s: max(us) / 1000.0 for s, us in _per_step(after, "nv_inference_queue_summary_us", quantile="0.99").items()}
    return means, p99


def _rounded(per_step: dict[str, float]) -> str:
    return ", ".join(f"{step} {ms:.0f}" for step, ms in per_step.items())


# Issue 37: a refused client learns it at once. Judged at p50 and p95: on the 2 cores that run nginx, Triton at its
# capacity, the flood's process and this client, a few of the ~230 refusals wait for a time slice (their p99, the 3rd
# slowest, was 55-189 ms in 8 of 14 runs at load 6-9 and 61 ms in a CI run of 2026-12-07, p50 1-4 ms in all).
REFUSAL_P50_MS, REFUSAL_P95_MS = 10.0, 50.0


def _flood(address: str, ca_cert: str, rate: float, duration_s: float, results: Any) -> None:
    """The 10x flood, in a process of its own: its client threads then never delay the measuring client's."""
    sender = Sender(address, "yolo", probe_image(), ssl=True, root_certificates=ca_cert)
    try:
        results.put(sender.open_loop(rate, duration_s))
    finally:
        sender.close()


def _summary(outcomes: list[Outcome]) -> str:
    ok = [o.latency_ms for o in outcomes if o.ok]
    refused = [o.latency_ms for o in outcomes if not o.ok]
    return (f"{len(outcomes)} sent; accepted {len(ok)} (p50 {percentile(ok, 50):.0f} ms, p95 {percentile(ok, 95):.0f}"
            f" ms); refused {len(refused)} (p50 {percentile(refused, 50):.1f} ms, p95 {percentile(refused, 95):.1f} ms, "
            f"p99 {percentile(refused, 99):.1f} ms)")


def test_ten_times_the_capacity_is_refused_at_once_and_accepted_requests_stay_in_budget(stack: LiveStack) -> None:
    """10x what the stack serves, through the proxy: the requests above the build's in-flight limit are refused at
    the proxy at once (RESOURCE_EXHAUSTED, deploy/proxy_admission.py), the accepted ones are answered within the
    build's recorded budget end to end, and nothing else happens to any request: answered or refused, none failed
    (Triton counts no failure either).

    The flood sends every request on one gRPC connection, as one channel of a real client does: nginx must keep
    that connection open while it refuses 9 in 10 of its streams (the proxy's http2_body_preread_size 0: a refused
    stream's body is never sent, so nginx's HTTP/2 flood guard no longer counts it; with it, the guard closed the
    connection within seconds and lost the accepted streams in flight).

    The flood runs in its own process. A client sending one request at a time meanwhile measures what a client
    sees; the flood's own client, which sends 10x capacity on the same 2 cores as the server, is printed too."""
    manifest = stack.stable_manifest()
    budget_ms = float(manifest["admission"]["max_queue_ms"])
    tls = {"ssl": True, "root_certificates": str(stack.ca_cert)}
    address = stack.endpoints["grpcs"].removeprefix("grpcs://")
    sender, reference = Sender(address, "yolo", probe_image(), **tls), Sender(address, "yolo", probe_image(), **tls)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    measured: list[Outcome] = []
    try:
        saturated = sender.closed_loop(8, 5.0)
        capacity = sum(o.ok for o in saturated) / 5.0
        reference.one_by_one(2)  # its TLS session first
        before = _metrics(stack)
        flood = context.Process(target=_flood, args=(address, str(stack.ca_cert), 10 * capacity, BURST_S, results))
        flood.start()
        started = time.monotonic()
        time.sleep(2.0)  # the flood's process starts and fills the limit
        while time.monotonic() - started < BURST_S - 1.0:
            measured.extend(reference.one_by_one(1, pause_s=0.05))
        burst: list[Outcome] = results.get(timeout=BURST_S + 120)
        flood.join(30)
        after = _metrics(stack)
    finally:
        sender.close()
        reference.close()
    mean_ms, p99_ms = _queue_waits(before, after)
    failed = _delta(before, after, "nv_inference_request_failure")
    outcomes = burst + measured
    refused_ms = [o.latency_ms for o in measured if not o.ok]
    accepted_ms = [o.latency_ms for o in outcomes if o.ok]
    print(f"\ncapacity through the proxy {capacity:.1f}/s, budget {budget_ms:.0f} ms, max_in_flight "
          f"{manifest['admission'].get('max_in_flight')}; 10x for {BURST_S:.0f} s: flood {_summary(burst)}; one at a "
          f"time meanwhile: {_summary(measured)}; all accepted p95 {percentile(accepted_ms, 95):.0f} ms; queue wait "
          f"per step (Triton's): mean {_rounded(mean_ms)} ms, p99 {_rounded(p99_ms)} ms")
    assert capacity > 0 and all(o.ok for o in saturated)
    assert sum(not o.ok for o in burst) > 0.5 * len(burst), "10x the capacity must be shed"
    # Nothing lost: every request answered or refused at the door, and Triton failed none of those it took.
    assert {(o.status, o.message) for o in outcomes if not o.ok} == {("StatusCode.RESOURCE_EXHAUSTED", BUSY_MESSAGE)}
    assert sum(failed.values()) == 0, failed
    assert len(refused_ms) >= 20
    assert percentile(refused_ms, 50) < REFUSAL_P50_MS and percentile(refused_ms, 95) < REFUSAL_P95_MS, refused_ms
    assert percentile(accepted_ms, 95) <= budget_ms
    # Triton's own measure agrees: no step held an accepted request longer than the budget.
    assert set(p99_ms) == set(STEPS) and max(p99_ms.values()) <= QUEUE_SLACK * budget_ms, p99_ms
    stack.wait_serving(30)
