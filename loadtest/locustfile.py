"""Locust entry point: ``locust -f loadtest/locustfile.py GrpcDetectionUser --host 127.0.0.1:8001``.

``python -m loadtest run`` wraps this with metrics scraping, health checks and reports; running Locust
directly works too (options ``--triton-*`` or ``LOADTEST_*`` environment variables).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import locust.stats
from locust import events
from locust.env import Environment

# Locust puts this file's folder first on sys.path while loading it (and removes sys.path[0] afterwards),
# so the project root is appended, not inserted, for ``loadtest``, ``clients`` and ``generator`` imports.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from loadtest.camera import BOOK, CameraGrpcUser, CameraHttpUser, camera_report
from loadtest.task_outputs import BOOK as OUTPUTS_BOOK
from loadtest.users import TritonGrpcUser, TritonHttpUser, add_locust_arguments, quitting_report

logger = logging.getLogger(__name__)
events.init_command_line_parser.add_listener(add_locust_arguments)

# Locust buffers the --csv files and flushes them every 10 s; rows still buffered at exit are lost, which
# truncates the history of short runs. Flush on every write (once a second) instead.
locust.stats.CSV_STATS_FLUSH_INTERVAL_SEC = 0


class GrpcDetectionUser(TritonGrpcUser):
    """The ensemble over gRPC (tritonclient.grpc)."""


class HttpDetectionUser(TritonHttpUser):
    """The ensemble over HTTP (tritonclient.http codec on geventhttpclient)."""


class GrpcCameraUser(CameraGrpcUser):
    """One camera at --triton-camera-fps over gRPC: latest-frame-wins, one request in flight."""


class HttpCameraUser(CameraHttpUser):
    """One camera at --triton-camera-fps over HTTP."""


@events.report_to_master.add_listener
def _camera_counts_to_master(client_id: str, data: dict[str, Any]) -> None:
    data["triton_cameras"] = BOOK.take_report()
    data["triton_outputs"] = OUTPUTS_BOOK.take_report()


@events.worker_report.add_listener
def _camera_counts_from_worker(client_id: str, data: dict[str, Any]) -> None:
    BOOK.merge(data.get("triton_cameras", {}))
    OUTPUTS_BOOK.merge(data.get("triton_outputs", {}))


_max_users = 0
_workers = 0


@events.test_start.add_listener
def _started(environment: Environment, **_: Any) -> None:
    global _workers
    # Counted at the start: by the time the master quits its workers have already left.
    _workers = len(getattr(environment.runner, "clients", {}) or {})


@events.spawning_complete.add_listener
def _spawned(user_count: int, **_: Any) -> None:
    global _max_users
    _max_users = max(_max_users, user_count)


@events.quitting.add_listener
def _quitting(environment: Environment, **_: Any) -> None:
    info = quitting_report(environment, _max_users, _workers)
    if BOOK.counts and info["runner"] != "WorkerRunner":
        info["cameras"] = camera_report(environment)
    if info["runner"] != "WorkerRunner":
        info["outputs"] = OUTPUTS_BOOK.report()
    path = getattr(environment.parsed_options, "triton_runinfo", "")
    if path and info["runner"] != "WorkerRunner":
        Path(path).write_text(json.dumps(info, indent=2))
    for reason in info.get("breaches", []):
        logger.error("threshold breached: %s", reason)
