"""Rollout outcomes in a row: healthy and degraded candidates of the demo rolled out one after another at a short
window under a light, steady load, each outcome recorded, so that "promotes a healthy candidate and rolls back a
degraded one, every time" is a count, not a hope.

One ``generator serve --model-control explicit`` on the demo; a paced load (``--rate`` requests/s over gRPC,
through a CanaryClient that follows the route file, no retries); then ``--rounds`` pairs of rollouts in turn: a
healthy candidate (the demo rebuilt: expected ``promote``) and a degraded one (``--conf-threshold 0.9999``: the
demo scores its shapes at 0.95-0.999, so it answers nothing; expected ``rollback``). Every round's record goes to
``OUTPUT/rounds.jsonl``, the summary to ``OUTPUT/summary.json`` and stdout. Lab code (not installed)::

    python -m tools.rollout_outcomes --rounds 20 --window-s 12 --rate 4 --output runs/rollout-outcomes
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from generator.demo import DEMO_ONNX
from generator.operate.admin import ModelControl, TritonAdminError
from generator.server.ports import free_ports

logger = logging.getLogger("rollout_outcomes")
KEY = "7" * 64
KINDS = {"healthy": ({}, "promote"), "degraded": ({"conf_threshold": 0.9999}, "rollback")}


class PacedLoad:
    """``rate`` requests a second from one thread, each through a CanaryClient that reads the route file."""

    def __init__(self, grpc_url: str, route_file: Path, rate: float) -> None:
        self.grpc_url, self.route_file, self.interval_s = grpc_url, route_file, 1.0 / rate
        self.answered = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from clients import NO_RETRY, DetectionClient
        from clients.canary import CanaryClient
        from generator.operate.rollout.arguments import control_images

        # Seven scenes: the canary share takes every 4th request at 25 %, and 7 is prime to 4, so both sides see
        # every scene (with 8 the canary would see two of them: different traffic, not a different model).
        images = control_images(None)[:7]
        make = lambda model: DetectionClient(self.grpc_url, model=model, timeout_s=20, retry=NO_RETRY)  # noqa: E731
        with CanaryClient(make, route_file=self.route_file) as client:
            sent, next_at = 0, time.monotonic()
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                next_at += self.interval_s
                try:
                    client.detect(images[sent % len(images)])
                    self.answered += 1
                except Exception as exc:  # noqa: BLE001 -- every failure is a finding of the run
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                sent += 1

    def __enter__(self) -> PacedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def _serve(repository: Path, output: Path) -> tuple[subprocess.Popen[bytes], ModelControl, dict[str, str]]:
    http, grpc, metrics, watchdog = free_ports(4)
    command = [sys.executable, "-m", "generator", "serve", f"--model-repository={repository}", "--model-control",
               "explicit", "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
               "--watchdog-metrics-port", str(watchdog)]
    log = (output / "serve.log").open("wb")
    process = subprocess.Popen(command, env={**os.environ, "TRITON_ADMIN_TOKEN": KEY}, stdout=log,
                               stderr=subprocess.STDOUT)
    control = ModelControl(f"127.0.0.1:{http}", f"127.0.0.1:{metrics}", KEY)
    deadline = time.monotonic() + 300
    while True:
        try:
            if "yolo" in control.loaded(timeout_s=5):
                break
        except TritonAdminError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"rollout_outcomes: the server did not start (see {output / 'serve.log'})")
        time.sleep(1.0)
    return process, control, {"http": f"127.0.0.1:{http}", "grpc": f"127.0.0.1:{grpc}"}


def _round(number: int, kind: str, repository: Path, control: ModelControl, urls: dict[str, str],
           args: argparse.Namespace, load: PacedLoad) -> dict[str, Any]:
    from generator.builder.spec.options import BuildOptions
    from generator.builder.versioned import add_version
    from generator.operate.rollout.arguments import control_images
    from generator.operate.rollout.workflow import RolloutSettings, rollout

    options, expected = KINDS[kind]
    add_version(args.onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000, **options))  # type: ignore[arg-type]
    errors_before, started = len(load.errors), time.monotonic()
    record = rollout(RolloutSettings(repository, control, f"http://{urls['http']}", control_images(None),
                                     canary_percent=args.canary_percent, window_s=args.window_s, watch_s=0.0))
    canary, stable = record.get("canary") or {}, record.get("stable") or {}
    return {"round": number, "kind": kind, "expected": expected, "action": record["action"],
            "as_expected": record["action"] == expected, "failed": record.get("failed"),
            "insufficient": record.get("insufficient"), "window": record.get("window"),
            "latency_pairs": record.get("latency_pairs"),
            "canary_requests": canary.get("requests") if isinstance(canary, dict) else None,
            "stable_requests": stable.get("requests") if isinstance(stable, dict) else None,
            "load_errors": len(load.errors) - errors_before, "seconds": round(time.monotonic() - started, 1)}


def summarise(rounds: Sequence[dict[str, Any]], args: argparse.Namespace, load: PacedLoad) -> dict[str, Any]:
    by_kind: dict[str, dict[str, int]] = {}
    for done in rounds:
        outcome = by_kind.setdefault(done["kind"], {})
        outcome[done["action"]] = outcome.get(done["action"], 0) + 1
    return {"rounds": len(rounds), "window_s": args.window_s, "rate_rps": args.rate,
            "canary_percent": args.canary_percent, "outcomes": by_kind,
            "as_expected": sum(d["as_expected"] for d in rounds), "requests_answered": load.answered,
            "requests_failed": len(load.errors), "cpu_count": os.cpu_count(), "load_average": os.getloadavg()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rollout_outcomes", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rollouts of each kind (healthy, degraded), in turn")
    parser.add_argument("--window-s", type=float, default=12.0)
    parser.add_argument("--rate", type=float, default=4.0, help="users' requests a second, all through the route")
    parser.add_argument("--canary-percent", type=float, default=25.0)
    parser.add_argument("--onnx", type=Path, default=DEMO_ONNX)
    parser.add_argument("--output", type=Path, default=Path("runs/rollout-outcomes"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    from clients.canary import Route, write_route
    from generator.builder.spec.options import BuildOptions
    from generator.builder.versioned import add_version
    from generator.repository.versions import ROUTE_NAME

    output = args.output / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    repository = output / "repository"
    output.mkdir(parents=True)
    add_version(args.onnx, repository, BuildOptions(name="yolo", max_queue_ms=5000))
    write_route(repository / ROUTE_NAME, Route("yolo"))
    process, control, urls = _serve(repository, output)
    rounds: list[dict[str, Any]] = []
    try:
        with PacedLoad(urls["grpc"], repository / ROUTE_NAME, args.rate) as load:
            time.sleep(2.0)
            for number in range(2 * args.rounds):
                done = _round(number + 1, ("healthy", "degraded")[number % 2], repository, control, urls, args, load)
                rounds.append(done)
                with (output / "rounds.jsonl").open("a") as out:
                    out.write(json.dumps(done) + "\n")
                logger.info("round %d %s: %s (%s)", done["round"], done["kind"], done["action"],
                            "as expected" if done["as_expected"] else f"EXPECTED {done['expected']}")
    finally:
        process.terminate()
        process.wait(timeout=120)
    summary = summarise(rounds, args, load)
    (output / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if summary["as_expected"] == len(rounds) and not load.errors else 1


if __name__ == "__main__":
    sys.exit(main())
