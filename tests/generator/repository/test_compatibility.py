"""TensorRT's engine compatibility rules on recorded version pairs."""

from __future__ import annotations

import pytest

from generator.repository.compatibility import parse_version, plan_loads, short


@pytest.mark.parametrize(("built", "runtime", "loads"), [
    ("10.3.0.26", "10.3.0", True),  # the same release (getInferLibVersion has no build number)
    ("10.3.0.26", "10.3.0.26", True),
    ("10.3.0.26", "10.3.1", False),  # any other release, newer or older, refuses a plain plan
    ("10.3.0.26", "10.2.0", False),
    ("10.8.0.43", "11.0.0", False),
    ("11.1.0", "11.1.0", True),
])
def test_plain_plans_need_the_exact_tensorrt(built: str, runtime: str, loads: bool) -> None:
    assert plan_loads(built, runtime, version_compatible=False).loads is loads


@pytest.mark.parametrize(("built", "runtime", "loads"), [
    ("10.3.0.26", "10.8.0", True),  # later releases of the same major
    ("10.3.0.26", "10.3.0", True),
    ("10.3.0.26", "10.2.0", False),  # never an older runtime
    ("11.0.0", "11.1.0", True),
    ("11.1.0", "11.0.0", False),
    ("10.8.0.43", "11.1.0", True),  # TensorRT 10 -> 11 is supported (11.x support matrix)
    ("8.6.1.6", "10.3.0", True),  # 8 -> 10 too (10.x docs)
    ("8.6.1.6", "11.1.0", False),  # 8 -> 11 is not
    ("8.5.3.1", "8.6.1", False),  # version compatibility starts with plans built by 8.6
    ("11.1.0", "12.0.0", False),  # no statement for later majors: refuse
])
def test_version_compatible_plans(built: str, runtime: str, loads: bool) -> None:
    verdict = plan_loads(built, runtime, version_compatible=True)
    assert verdict.loads is loads, verdict.reason


def test_reasons_and_version_parsing() -> None:
    assert parse_version("10.3.0.26") == (10, 3, 0, 26) and parse_version("10.13.0.post12") == (10, 13, 0)
    assert short("10.3.0.26") == "10.3.0" and short("weird") == "weird"
    assert "older 10.2.0" in plan_loads("10.3.0", "10.2.0", True).reason
    assert "only with the TensorRT that built it (10.3.0), not 10.4.0" in plan_loads("10.3.0", "10.4.0", False).reason
    assert not plan_loads("x", "10.3.0", False).loads
