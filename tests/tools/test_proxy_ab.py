"""tools/proxy_ab.py: the CLI's own checks (the measurement itself runs against real proxies, docs/SECURITY.md)."""

from __future__ import annotations

import pytest

from tools import proxy_ab


def test_two_protocols_cannot_be_compared(capsys: pytest.CaptureFixture[str]) -> None:
    code = proxy_ab.main(["--a", "https://localhost:1", "--b", "grpcs://localhost:2", "--ca-cert", "ca.crt"])
    assert code == 1 and "same protocol" in capsys.readouterr().err
