"""Two running servers, A and B, measured in alternating windows: a before/after that survives a busy machine.

On a shared CPU the speed of everything drifts by more than most changes are worth within minutes, so two
bench runs minutes apart compare the machine's moods as much as the builds. Here each round measures A then
B (B then A in the next round, so neither always goes first) back to back within seconds, at concurrency 1
(latency) and under load (throughput); the differences are taken within a round, and their median and
range over the rounds say how far to trust them.
"""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .closed_loop import client_factory, closed_loop
from .errors import LoadTestError
from .images import synthetic_images

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompareSettings:
    model: str = "yolo"
    protocol: str = "grpc"
    size: tuple[int, int] = (1280, 720)
    concurrency: int = 4  # the throughput window; latency is measured at concurrency 1
    rounds: int = 6
    window_s: float = 6.0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.window_s <= 0 or self.concurrency < 1:
            raise LoadTestError("--rounds, --window and --concurrency must be positive")


def _side(make: Any, images: list[bytes], settings: CompareSettings) -> dict[str, Any]:
    single = closed_loop(make, images, 1, settings.window_s, 1)
    busy = closed_loop(make, images, settings.concurrency, settings.window_s, 1)
    if not single.latencies_ms or not busy.latencies_ms:
        raise LoadTestError(f"no request succeeded in a window: {'; '.join(single.errors + busy.errors)}")
    return {"p50_c1_ms": round(statistics.median(single.latencies_ms), 1),
            "rps": round(len(busy.latencies_ms) / busy.elapsed_s, 2), "failures": single.failures + busy.failures}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def compare_servers(urls: dict[str, str], settings: CompareSettings) -> dict[str, Any]:
    """``urls``: exactly two names (A first) -> address. Per-round B/A throughput and B-A latency at c=1."""
    if len(urls) != 2:
        raise LoadTestError(f"compare takes exactly two servers, got {len(urls)}")
    (a, b) = urls
    images = synthetic_images([settings.size], per_size=4)
    makers = {name: client_factory(settings.protocol, url, settings.model, settings.timeout_s)
              for name, url in urls.items()}
    rounds = []
    for index in range(settings.rounds):
        load = [round(os.getloadavg()[0], 2)]
        order = (a, b) if index % 2 == 0 else (b, a)
        record: dict[str, Any] = {"order": list(order)}
        for name in order:
            record[name] = _side(makers[name], images, settings)
        load.append(round(os.getloadavg()[0], 2))
        record.update(loadavg_1m=load, rps_ratio=round(record[b]["rps"] / record[a]["rps"], 3),
                      p50_c1_delta_ms=round(record[b]["p50_c1_ms"] - record[a]["p50_c1_ms"], 1))
        rounds.append(record)
        logger.info("  round %d: %s %s rps, p50 c=1 %s ms | %s %s rps, p50 c=1 %s ms | load %s", index + 1, a,
                    record[a]["rps"], record[a]["p50_c1_ms"], b, record[b]["rps"], record[b]["p50_c1_ms"], load)
    return {"servers": list(urls), "settings": {**asdict(settings), "size": list(settings.size)}, "rounds": rounds,
            "summary": {"rps_ratio": _spread([r["rps_ratio"] for r in rounds]),
                        "p50_c1_delta_ms": _spread([r["p50_c1_delta_ms"] for r in rounds]),
                        **{f"{name}_{key}": _spread([r[name][key] for r in rounds])
                           for name in urls for key in ("rps", "p50_c1_ms")}}}


def compare_lines(result: dict[str, Any]) -> list[str]:
    """Markdown: one row per round, then the medians and ranges."""
    a, b = result["servers"]
    s = result["settings"]
    lines = [f"{s['protocol']} {s['size'][0]}x{s['size'][1]} JPEG, {s['rounds']} rounds of two {s['window_s']} s "
             f"windows per server (concurrency 1, then {s['concurrency']}), order alternating.", "",
             f"| round | first | {a} rps | {b} rps | {b}/{a} | {a} p50 c=1 ms | {b} p50 c=1 ms | {b}-{a} ms | load 1m |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for i, r in enumerate(result["rounds"], 1):
        lines.append(f"| {i} | {r['order'][0]} | {r[a]['rps']} | {r[b]['rps']} | {r['rps_ratio']} | {r[a]['p50_c1_ms']} "
                     f"| {r[b]['p50_c1_ms']} | {r['p50_c1_delta_ms']} | {' -> '.join(map(str, r['loadavg_1m']))} |")
    summary = result["summary"]
    lines += ["", f"- throughput {b}/{a}: median **{summary['rps_ratio']['median']}** "
                  f"(range {summary['rps_ratio']['min']} - {summary['rps_ratio']['max']})",
              f"- p50 at concurrency 1, {b} minus {a}: median **{summary['p50_c1_delta_ms']['median']} ms** "
              f"(range {summary['p50_c1_delta_ms']['min']} - {summary['p50_c1_delta_ms']['max']})"]
    return lines
