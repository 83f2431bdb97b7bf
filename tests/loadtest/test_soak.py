"""``python -m loadtest soak`` against a real embedded Triton: sampling, traffic checks and the verdict.

A short run (about half a minute) with generous limits; the verdict logic is then held to limits just
below and just above what this run really measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from generator.server.ports import free_port
from loadtest.hostile import bad_images
from loadtest.resources import SERVER_NAME, listening_pid
from loadtest.soak import SoakSettings, Traffic
from loadtest.soak_report import Limits, growths, read_samples, summarise

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WARMUP_S = 4.0


@pytest.fixture(scope="module")
def soak_run(triton_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("soak")
    result = subprocess.run(
        [sys.executable, "-m", "loadtest", "soak", "--repository", str(triton_server.repository),
         "--http-port", str(free_port()), "--grpc-port", str(free_port()), "--metrics-port", str(free_port()),
         "--duration", "16s", "--warmup", f"{WARMUP_S:g}s", "--sample-interval", "1", "--rate", "16",
         "--bad-every", "4", "--sizes", "320x240", "--images-per-size", "2",
         "--max-rss-growth-mb-per-hour", "100000", "--max-fd-growth-per-hour", "100000",
         "--max-shm-growth-mb-per-hour", "100000", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=180, check=False,
    )
    return result, out


def test_soak_samples_the_server_and_every_stub(soak_run, triton_server):
    result, out = soak_run
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["server"]["mode"] == "embedded" and summary["verdict"] == {"passed": True, "reasons": []}
    name = triton_server.model_name
    # The Python backend's stubs, found as tritonserver's children by their model instance.
    assert {SERVER_NAME, f"{name}_preprocess_0_0", f"{name}_detector_0_0",
            f"{name}_nms_0_0"} <= set(summary["processes"])
    samples = read_samples(out / summary["files"]["samples"])
    assert len(samples) == summary["samples"] >= 12
    for sample in samples:
        server = next(p for p in sample.processes if p.name == SERVER_NAME)
        assert server.rss_bytes > 10 * 2**20 and server.fds > 10 and server.shm_bytes == 0
        stubs = [p for p in sample.processes if p.name != SERVER_NAME]
        assert all(p.rss_bytes > 0 and p.fds > 0 and p.shm_bytes >= 2**20 for p in stubs)
    assert samples[-1].good_ok > samples[0].good_ok  # traffic ran between the samples
    assert (out / "soak.png").read_bytes()[:4] == b"\x89PNG"
    assert str(ROOT) not in (out / "summary.json").read_text()  # names, not machine paths


def test_soak_traffic_good_images_succeed_and_bad_ones_are_refused(soak_run):
    _, out = soak_run
    traffic = json.loads((out / "summary.json").read_text())["traffic"]
    assert traffic["good"]["ok"] > 50 and traffic["good"]["failed"] == 0
    assert set(traffic["bad"]) == {image.kind for image in bad_images()}
    assert all(counts["sent"] >= 2 and counts["rejected"] == counts["sent"] for counts in traffic["bad"].values())
    assert traffic["bad_not_refused_as_expected"] == 0 and traffic["unexpected"] == []


def test_the_verdict_on_this_run_follows_the_limits(soak_run):
    _, out = soak_run
    summary = json.loads((out / "summary.json").read_text())
    samples = read_samples(out / "samples.csv")
    measured = growths(samples, WARMUP_S)
    assert {k: v.to_dict() for k, v in measured.items()} == summary["growth_per_hour"]
    settings = SoakSettings(duration_s=16, warmup_s=WARMUP_S)
    rss, fds, shm = (measured[k].per_hour for k in ("rss_total_mb", "fds_total", "shm_mb"))
    above = Limits(rss + 1, fds + 1, shm + 1)
    assert summarise(settings, above, samples, Traffic(), [])["verdict"]["passed"]
    below = summarise(settings, Limits(rss - 1, fds + 1, shm + 1), samples, Traffic(), [])["verdict"]
    assert not below["passed"] and below["reasons"][0].startswith("rss_total_mb grew")
    failed_images = Traffic(good_failed=3)
    assert "3 good image(s) failed" in summarise(settings, above, samples, failed_images, [])["verdict"]["reasons"]


def test_attaching_finds_the_server_listening_on_the_port(triton_server):
    port = int(triton_server.grpc_url.rsplit(":", 1)[1])
    process = psutil.Process(listening_pid(port))
    assert SERVER_NAME in process.name() and f"--grpc-port={port}" in process.cmdline()
