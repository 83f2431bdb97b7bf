"""Waiting for a server this project started stops as soon as it exits, with its own error line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from generator.errors import ServerError
from generator.server.ports import free_port
from generator.server.startup import error_line, pid_alive, wait_for_pid

PORT_LINE = "error: cannot serve the watchdog metrics on 127.0.0.1:8003: Address already in use"


def test_the_error_line_is_the_last_one_that_reads_as_an_error(tmp_path: Path) -> None:
    log = tmp_path / "triton.log"
    log.write_text(f"I1206 starting\n{PORT_LINE}\nTriton stopped (exit code 1).\n\n")
    assert error_line(log) == PORT_LINE
    log.write_text("I1206 starting\nE1206 08:55:01.1 model_lifecycle.cc:1] failed to load 'yolo'\nI1206 bye\n")
    assert error_line(log) == "E1206 08:55:01.1 model_lifecycle.cc:1] failed to load 'yolo'"
    log.write_text("Traceback (most recent call last):\n  File x\nOSError: [Errno 98] Address in use\n")
    assert error_line(log) == "OSError: [Errno 98] Address in use"
    log.write_text("one\nthe last words\n")
    assert error_line(log) == "the last words"
    assert error_line(tmp_path / "missing.log") is None


def test_a_server_that_exits_stops_the_wait_at_once_with_its_error_line(tmp_path: Path) -> None:
    log = tmp_path / "triton.log"
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-c", f"print('starting'); print({PORT_LINE!r}); raise SystemExit(1)"],
                                 stdout=out, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        with pytest.raises(ServerError) as raised:
            wait_for_pid(child.pid, [f"http://127.0.0.1:{free_port()}/v2/health/ready"], log, timeout_s=300,
                         what="generator serve")
    finally:
        child.wait()
    assert time.monotonic() - started < 60  # not the 300 s budget: the exit is seen on the next poll
    assert str(raised.value) == f"generator serve exited before it was ready: {PORT_LINE}; log: {log}"


def test_a_running_server_that_never_answers_times_out_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v2/health/ready"
    with pytest.raises(ServerError, match=rf"^the server was not ready after 1 s \({url} did not answer\)$"):
        wait_for_pid(os.getpid(), [url], None, timeout_s=1)


def test_an_exited_child_not_yet_reaped_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(child.pid)  # a zombie until wait() below
    finally:
        child.wait()
    assert pid_alive(os.getpid())
