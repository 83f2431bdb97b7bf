"""The ensemble's quality histograms as Prometheus histograms, re-exported from Triton's metrics endpoint.

The NMS step counts each histogram's series itself and adds them to Triton's metrics as counters, once a second
(generator/serving/telemetry.py: 2.51's Python backend has no call that adds a count to a histogram, and one
``observe`` per detection is one round trip each). Triton writes each part as a family of its own with TYPE
``counter`` (``NAME_bucket{le}``, ``NAME_sum``, ``NAME_count``), which ``promtool check metrics`` refuses and
Prometheus cannot treat as one histogram. The watchdog reads those series from Triton's loopback when its own
endpoint is scraped and writes them under the same names and labels as one ``histogram`` family each; the
Prometheus job of Triton's endpoint drops the counter parts (``DROP_REGEX``), so each series is stored once.
The rollout still reads the counter parts from Triton's endpoint directly (the same numbers and names).

Standard library only: the Triton image copies this file beside watchdog.py.
"""

from __future__ import annotations

import http.client
import logging
import re
from collections.abc import Iterable

logger = logging.getLogger(__name__)

# generator/serving/contract.py DETECTIONS_METRIC and SCORE_METRIC (a test holds them equal).
HISTOGRAMS = {
    "ensemble_detections_per_image": "Detections returned per image",
    "ensemble_detection_score": "Score of every returned detection",
}
PARTS = ("bucket", "sum", "count")
# The sample names this module re-exports: what the Prometheus job of Triton's endpoint drops.
DROP_REGEX = f"({'|'.join(HISTOGRAMS)})_({'|'.join(PARTS)})"

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_WANTED = re.compile(f"^{DROP_REGEX}$")

Labels = tuple[tuple[str, str], ...]


def _le_order(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le)


def _samples(text: str) -> Iterable[tuple[str, str, Labels, str]]:
    """(family, part, labels, value) of every re-exported sample in a Prometheus text exposition."""
    for line in text.splitlines():
        if not line.startswith("ensemble_"):
            continue
        match = _SAMPLE.match(line)
        if match is None or not _WANTED.match(match["name"]):
            continue
        family, part = match["name"].rsplit("_", 1)
        labels = tuple(sorted(_LABEL.findall(match["labels"] or "")))
        yield family, part, labels, match["value"]


def reexport(text: str) -> str:
    """The histogram parts of Triton's exposition ``text`` as one TYPE ``histogram`` family each (same names and
    labels), every label set's buckets in ``le`` order, then its sum and count; "" when there are none."""
    grouped: dict[str, dict[Labels, dict[str, list[tuple[Labels, str]]]]] = {}
    for family, part, labels, value in _samples(text):
        own = tuple(pair for pair in labels if pair[0] != "le")
        grouped.setdefault(family, {}).setdefault(own, {}).setdefault(part, []).append((labels, value))
    lines: list[str] = []
    for family, help_text in HISTOGRAMS.items():
        if family not in grouped:
            continue
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} histogram"]
        for parts in grouped[family].values():
            if not {"bucket", "sum", "count"} <= set(parts):
                continue  # a scrape taken while the step registered its series: wait for the next one
            buckets = sorted(parts["bucket"], key=lambda item: _le_order(dict(item[0])["le"]))
            lines += [f"{family}_bucket{_format(labels)} {value}" for labels, value in buckets]
            lines += [f"{family}_{part}{_format(parts[part][0][0])} {parts[part][0][1]}" for part in ("sum", "count")]
    return "\n".join(lines) + "\n" if lines else ""


def _format(labels: Labels) -> str:
    return "{" + ",".join(f'{key}="{value}"' for key, value in labels) + "}" if labels else ""


def metrics_port(command: list[str] | tuple[str, ...]) -> int | None:
    """The port of tritonserver's metrics endpoint in its ``command`` (8002 by default), None when metrics are off."""
    flags = dict(arg[2:].split("=", 1) for arg in command[1:] if arg.startswith("--") and "=" in arg)
    if flags.get("allow-metrics", "true") == "false":
        return None
    return int(flags.get("metrics-port", "8002"))


def scrape(port: int, timeout_s: float = 2.0) -> str:
    """Triton's metrics from its loopback; "" while it does not answer (starting, restarting)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read().decode()
        return body if response.status == 200 else ""
    except OSError as exc:
        logger.debug("no scrape of Triton's metrics on port %d: %s", port, exc)
        return ""
    finally:
        connection.close()


def histograms_of(port: int) -> str:
    """What the watchdog's endpoint adds: the ensemble's histograms as read from Triton's metrics on ``port``."""
    return reexport(scrape(port))
