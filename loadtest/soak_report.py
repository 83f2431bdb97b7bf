"""A soak's samples as series, its growth per hour and verdict, and the files it leaves: CSV, JSON, PNG."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import RunError
from .growth import Growth, breaches, growth
from .resources import SERVER_NAME, ProcessSample
from .soak import Sample, SoakSettings, Traffic

MB = 2**20
CSV_COLUMNS = ("t_s", "good_ok", "process", "pid", "rss_bytes", "fds", "shm_bytes")


@dataclass(frozen=True)
class Limits:
    """Growth per hour above which a soak fails (Triton's QA fails long runs that grow more than 100 MB)."""

    rss_total_mb: float = 100.0
    fds_total: float = 60.0
    shm_mb: float = 50.0

    def as_series(self) -> dict[str, float]:
        return asdict(self)


def series(samples: Sequence[Sample]) -> dict[str, tuple[str, list[float]]]:
    """Name -> (unit, values) for the totals the verdict reads and the parts that explain them."""
    def total(pick: Any, only: Any = lambda p: True) -> list[float]:
        return [float(sum(pick(p) for p in s.processes if only(p))) for s in samples]

    def is_server(p: ProcessSample) -> bool:
        return p.name == SERVER_NAME

    return {
        "rss_total_mb": ("MB", [v / MB for v in total(lambda p: p.rss_bytes)]),
        "server_rss_mb": ("MB", [v / MB for v in total(lambda p: p.rss_bytes, is_server)]),
        "stubs_rss_mb": ("MB", [v / MB for v in total(lambda p: p.rss_bytes, lambda p: not is_server(p))]),
        "fds_total": ("fds", total(lambda p: p.fds)),
        "shm_mb": ("MB", [v / MB for v in total(lambda p: p.shm_bytes)]),
    }


def growths(samples: Sequence[Sample], warmup_s: float) -> dict[str, Growth]:
    t = [s.t_s for s in samples]
    return {name: growth(t, values, warmup_s, unit) for name, (unit, values) in series(samples).items()}


def per_process_growth(samples: Sequence[Sample], warmup_s: float) -> dict[str, float]:
    """RSS growth (MB/hour) of each process that was there from the first sample to the last."""
    first, last = samples[0].processes, samples[-1].processes
    stable = {p.name for p in first} & {p.name for p in last}
    result = {}
    for name in sorted(stable):
        points = [(s.t_s, p.rss_bytes / MB) for s in samples for p in s.processes if p.name == name]
        result[name] = round(growth([t for t, _ in points], [v for _, v in points], warmup_s, "MB").per_hour, 2)
    return result


def process_changes(samples: Sequence[Sample]) -> list[str]:
    """Stubs that exited or were replaced during the run (Triton 2.51 does not restart a dead stub)."""
    first = {p.name: p.pid for p in samples[0].processes}
    last = {p.name: p.pid for p in samples[-1].processes}
    changes = [f"{name} exited during the run" for name in sorted(set(first) - set(last))]
    changes += [f"{name} was replaced (pid {first[name]} -> {last[name]})"
                for name in sorted(set(first) & set(last)) if first[name] != last[name]]
    return changes + [f"{name} appeared during the run" for name in sorted(set(last) - set(first))]


def verdict(found: dict[str, Growth], limits: Limits, traffic: Traffic, problems: Sequence[str]) -> list[str]:
    """Every reason the soak fails: growth over a limit, a wrong answer, a process that changed, a stop."""
    reasons = breaches(found, limits.as_series())
    if traffic.good_failed:
        reasons.append(f"{traffic.good_failed} good image(s) failed")
    if traffic.bad_wrong:
        reasons.append(f"{traffic.bad_wrong} bad image(s) were not refused with their own message")
    return reasons + list(problems)


def write_samples(samples: Sequence[Sample], path: Path) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for s in samples:
            for p in s.processes:
                writer.writerow([s.t_s, s.good_ok, p.name, p.pid, p.rss_bytes, p.fds, p.shm_bytes])
    return path


def read_samples(path: Path) -> list[Sample]:
    """The samples back from ``write_samples``' CSV (to re-check a run against other limits)."""
    rows: dict[float, tuple[int, list[ProcessSample]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            entry = rows.setdefault(float(row["t_s"]), (int(row["good_ok"]), []))
            entry[1].append(ProcessSample(row["process"], int(row["pid"]), int(row["rss_bytes"]), int(row["fds"]),
                                          int(row["shm_bytes"])))
    return [Sample(t, tuple(procs), ok) for t, (ok, procs) in sorted(rows.items())]


def summarise(settings: SoakSettings, limits: Limits, samples: Sequence[Sample], traffic: Traffic,
              problems: Sequence[str]) -> dict[str, Any]:
    """The JSON summary: settings, traffic, growth per hour of every series, and the verdict with its reasons."""
    if len(samples) < 2:
        raise RunError(f"only {len(samples)} sample(s) were taken: {'; '.join(problems) or 'the run was too short'}")
    found = growths(samples, settings.warmup_s)
    reasons = verdict(found, limits, traffic, [*problems, *process_changes(samples)])
    elapsed = samples[-1].t_s - samples[0].t_s
    return {
        "tool": "soak",
        "settings": asdict(settings),
        "limits_per_hour": limits.as_series(),
        "traffic": {**traffic.to_dict(),
                    "good_per_s": round((samples[-1].good_ok - samples[0].good_ok) / elapsed, 2) if elapsed else None},
        "samples": len(samples),
        "processes": sorted({p.name for s in samples for p in s.processes}),
        "growth_per_hour": {name: g.to_dict() for name, g in found.items()},
        "rss_growth_per_process_mb_per_hour": per_process_growth(samples, settings.warmup_s),
        "verdict": {"passed": not reasons, "reasons": reasons},
    }


def plot(samples: Sequence[Sample], summary: dict[str, Any], path: Path, title: str) -> Path:
    """The soak figure: RSS (total, server, stubs), open fds, /dev/shm, and good requests per second."""
    from .plot import plot_soak

    named = {name: values for name, (_, values) in series(samples).items()}
    t = [s.t_s for s in samples]
    rate = [0.0] + [(b.good_ok - a.good_ok) / (b.t_s - a.t_s) if b.t_s > a.t_s else 0.0
                    for a, b in itertools.pairwise(samples)]
    fits = {name: (g["at_warmup"], g["per_hour"]) for name, g in summary["growth_per_hour"].items()}
    panels = [
        ("RSS (MB)", {k: named[k] for k in ("rss_total_mb", "server_rss_mb", "stubs_rss_mb")}),
        ("open fds", {"fds_total": named["fds_total"]}),
        ("/dev/shm (MB)", {"shm_mb": named["shm_mb"]}),
        ("good requests/s", {"served": rate}),
    ]
    fitted = {k: v for k, v in fits.items() if k in ("rss_total_mb", "fds_total", "shm_mb")}
    return plot_soak(t, panels, summary["settings"]["warmup_s"], fitted, path, title)
