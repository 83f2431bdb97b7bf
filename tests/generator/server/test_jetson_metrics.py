"""The Jetson exporter on recorded tegrastats lines (tests/fixtures/tegrastats; no Jetson here), and its alerts
fired by `promtool test rules` on the series it renders from them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from deploy.render.alerts import rule_groups
from deploy.settings import Settings
from generator.server import jetson_metrics
from generator.server.jetson_metrics import (
    JetsonUnavailable,
    mode_budget_watts,
    parse_power_mode,
    parse_tegrastats,
    render,
)
from loadtest.metrics import parse_prometheus

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tegrastats"
MIB = 1024 * 1024
G = (("gpu", "0"), ("uuid", "jetson"))


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse_prometheus(text)}


def test_an_orin_line_in_prometheus_units_under_the_nvml_names() -> None:
    idle, busy = (parse_tegrastats(line) for line in lines("orin-nano-jp6.txt"))
    assert idle.cpu == {0: 0.02, 1: 0.01, 2: 0.0, 3: 0.0}  # the two offline cores are absent, not 0
    got = values(render(busy, "15W"))
    assert got[("gpu_utilization_ratio", G)] == 0.99
    assert got[("gpu_memory_used_bytes", G)] == 6950 * MIB and got[("gpu_memory_total_bytes", G)] == 7620 * MIB
    assert got[("gpu_temperature_celsius", G)] == 89.25
    assert got[("gpu_power_watts", G)] == 14.9 and got[("gpu_power_limit_watts", G)] == 15
    assert got[("jetson_rail_power_watts", (("rail", "VDD_CPU_GPU_CV"),))] == 7.712
    assert got[("jetson_temperature_celsius", (("zone", "tj"),))] == 91.0
    assert got[("jetson_cpu_utilization_ratio", (("core", "3"),))] == 0.9
    assert got[("jetson_swap_used_bytes", ())] == 512 * MIB and got[("jetson_emc_utilization_ratio", ())] == 0.47
    assert got[("jetson_power_mode", (("mode", "15W"),))] == 1


def test_older_jetpacks_parse_and_what_they_lack_stays_absent() -> None:
    xavier = parse_tegrastats(lines("agx-xavier-jp5.txt")[0])
    assert xavier.gpu_ratio == 0.0 and xavier.temperatures["gpu"] == 31.5 and len(xavier.cpu) == 4
    assert xavier.input_watts is None and xavier.rails_watts["SYS5V"] == 2.312  # no VDD_IN rail on a Xavier
    assert "gpu_power_watts" not in render(xavier)
    nano = parse_tegrastats(lines("nano-jp4.txt")[0])
    assert nano.input_watts == 1.143 and nano.ram_total_bytes == 3964 * MIB
    assert "pmic" not in nano.temperatures  # the Nano's PMIC reads a fixed 100C: no sensor behind it
    assert "gpu_power_limit_watts" not in render(nano, "MAXN")  # MAXN states no budget


def test_power_modes_and_bad_input() -> None:
    assert parse_power_mode("NV Power Mode: 15W\n2\n") == "15W" and parse_power_mode("nvpmodel: error") is None
    assert mode_budget_watts("7W_AI") == 7 and mode_budget_watts("MAXN_SUPER") is None
    with pytest.raises(ValueError, match="not a tegrastats line"):
        parse_tegrastats("Segmentation fault")


def test_without_tegrastats_a_clear_error_and_no_series(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JETSON_TEGRASTATS", str(tmp_path / "absent"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JetsonUnavailable, match="tegrastats not found"):
        jetson_metrics.JetsonMonitor()


def test_the_alert_rules_fire_on_a_hot_full_capped_jetson(tmp_path: Path) -> None:
    """30 min idle then 30 min busy (the recorded lines, 15W mode): memory, power and temperature fire."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `apt-get install prometheus` (.ci/run installs it)")
    idle, busy = (values(render(parse_tegrastats(line), "15W")) for line in lines("orin-nano-jp6.txt"))
    series = [{"series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}",
               "values": f"{idle[(name, labels)]:.17g}x30 {busy[(name, labels)]:.17g}x30"}
              for name, labels in idle if name.startswith(("gpu_", "jetson_temperature"))]
    groups = rule_groups(Settings())
    for rule in groups[0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    uuid = {"uuid": "jetson"}
    expected = {
        ("25m", "GpuMemoryNearFull"): [], ("55m", "GpuMemoryNearFull"): [{"exp_labels": {"severity": "warning", **uuid}}],
        ("25m", "GpuPowerThrottling"): [], ("55m", "GpuPowerThrottling"): [{"exp_labels": {"severity": "warning", **uuid}}],
        ("25m", "JetsonTemperatureHigh"): [],
        ("55m", "JetsonTemperatureHigh"): [{"exp_labels": {"severity": "critical", "zone": z}}
                                           for z in ("cpu", "gpu", "soc0", "soc1", "soc2", "tj")],
    }
    test = {"interval": "1m", "input_series": series, "alert_rule_test": [
        {"eval_time": at, "alertname": name, "exp_alerts": alerts} for (at, name), alerts in expected.items()]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["alerts.yml"], "evaluation_interval": "1m",
                                                       "tests": [test]}, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], capture_output=True, text=True, cwd=tmp_path,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_monitor_follows_tegrastats_and_the_watchdog_exports_it(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """The host tools replayed: a script printing the recorded lines as tegrastats would, and nvpmodel's answer."""
    tegrastats = tmp_path / "tegrastats"
    tegrastats.write_text(f"#!/bin/sh\ncat {FIXTURES / 'orin-nano-jp6.txt'}\nexec sleep 5\n")
    nvpmodel = tmp_path / "nvpmodel"
    nvpmodel.write_text("#!/bin/sh\nprintf 'NV Power Mode: 15W\\n0\\n'\n")
    for tool in (tegrastats, nvpmodel):
        tool.chmod(0o755)
    monkeypatch.setenv("JETSON_TEGRASTATS", str(tegrastats))
    monkeypatch.setenv("JETSON_NVPMODEL", str(nvpmodel))
    monitor = jetson_metrics.JetsonMonitor()
    assert monitor.mode == "15W" and monitor.render() == ""  # nothing read yet: absent, not 0
    monitor.start()
    deadline = time.monotonic() + 10
    while "0.99" not in monitor.render() and time.monotonic() < deadline:
        time.sleep(0.05)
    got = values(monitor.render())
    assert got[("gpu_utilization_ratio", G)] == 0.99 and got[("jetson_power_mode", (("mode", "15W"),))] == 1

    from generator.server import watchdog

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: the watchdog's GPU series turn to the Jetson
    series = watchdog.jetson_series()
    assert series is not None
    deadline = time.monotonic() + 10
    while "jetson_rail_power_watts" not in series() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 'jetson_rail_power_watts{rail="VDD_IN"}' in series()
