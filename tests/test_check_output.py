"""What ``watchdog check`` prints: the Nagios line, the per-GPU table, colour rules, JSON."""

from __future__ import annotations

import io
import json
import re

from watchdog import reasons
from watchdog.check import report, table
from watchdog.check.judge import judge
from watchdog.model import DeviceInfo, Sample, XidEvent

DEV = [DeviceInfo(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3",
                  power_limit_enforced_w=700.0, clocks_max_sm_mhz=1980.0,
                  memory_total_mib=81559.0, pcie_max_gen=5, pcie_max_width=16,
                  driver_version="565.57.01") for i in range(3)]


def _sample(i: int, **values) -> Sample:
    base = {"utilization.gpu": 100.0, "power.draw": 690.0, "enforced.power.limit": 700.0,
            "memory.used": 76000.0, "memory.total": 81559.0, "temperature.gpu": 61.0,
            "clocks.sm": 1755.0,
            "clocks_event_reasons.active": float(reasons.SW_POWER_CAP | reasons.SYNC_BOOST),
            "temperature.memory": None}
    return Sample(ts=1_750_000_000.0, uuid=f"GPU-{i}", index=i, values={**base, **values})


def _verdict():
    bursts = {"GPU-0": [_sample(0)],
              "GPU-1": [_sample(1, **{"clocks_event_reasons.active": float(0x20)})],
              "GPU-2": [Sample(ts=1_750_000_000.0, uuid="GPU-2", index=2, lost=True,
                               xids=(XidEvent(1_750_000_000.0, "GPU-2", 2, 79),))]}
    return judge(DEV, bursts, host="node-7", checked_at=1_750_000_000.0, expected_gpus=3,
                 duration_s=1.5)


def test_table_shows_decoded_reasons_verdicts_and_status_line():
    out = table.render(_verdict())
    lines = out.splitlines()
    assert lines[0].startswith("WATCHDOG CRITICAL - GPU 2: ")
    assert "driver 565.57.01" in lines[1] and "3 GPUs (expected 3)" in lines[1]
    row0 = next(ln for ln in lines if ln.lstrip().startswith("0 "))
    assert "power cap, sync boost" in row0 and "H100 80GB HBM3" in row0
    assert "690/700 W" in row0 and "1755 MHz" in row0 and "74.2/79.6 GiB" in row0
    assert row0.rstrip().endswith("OK")
    row1 = next(ln for ln in lines if ln.lstrip().startswith("1 "))
    assert "SW thermal slowdown" in row1 and "WARNING" in row1
    row2 = next(ln for ln in lines if ln.lstrip().startswith("2 "))
    assert "CRITICAL" in row2 and "(+1 more)" in row2
    assert "XID 79 (GPU has fallen off the bus)" in out
    assert lines[-1] == "verdict: CRITICAL (1 warning, 2 critical)"
    assert "\033[" not in out


def test_healthy_status_line():
    v = judge(DEV[:1], {"GPU-0": [_sample(0)]}, host="n", checked_at=0.0)
    assert table.status_line(v) == "WATCHDOG OK - 1 GPUs healthy"
    assert table.render(v).splitlines()[-1] == "verdict: OK"


def test_missing_values_print_as_dash_not_zero():
    s = _sample(0, **{"temperature.gpu": None, "power.draw": None})
    out = table.render(judge(DEV[:1], {"GPU-0": [s]}, host="n", checked_at=0.0))
    row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("0 "))
    assert "-/700 W" in row and " 0 C" not in row


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color():
    assert table.use_color(_Tty(), no_color=False, environ={})
    assert not table.use_color(io.StringIO(), no_color=False, environ={})
    assert not table.use_color(_Tty(), no_color=False, environ={"NO_COLOR": "1"})
    assert not table.use_color(_Tty(), no_color=True, environ={})
    coloured = table.render(_verdict(), color=True)
    assert "\033[1;31mCRITICAL" in coloured
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == table.render(_verdict())


def test_json_schema():
    doc = json.loads(report.to_json(_verdict()))
    assert set(doc) >= {"status", "exit_code", "host", "checked_at", "gpus", "problems"}
    assert (doc["status"], doc["exit_code"], doc["host"]) == ("CRITICAL", 2, "node-7")
    assert doc["checked_at"] == "2025-06-15T15:06:40.000+00:00"
    assert [g["index"] for g in doc["gpus"]] == [0, 1, 2]
    g0, g1, g2 = doc["gpus"]
    assert set(g0) >= {"index", "uuid", "name", "status", "reasons", "metrics"}
    assert (g0["status"], g0["reasons"], g0["uuid"]) == ("OK", [], "GPU-0")
    assert g0["clock_events"] == ["sw_power_cap", "sync_boost"]
    assert g0["metrics"]["power.draw"] == 690 and g0["metrics"]["temperature.memory"] is None
    assert g1["status"] == "WARNING" and "thermal slowdown" in g1["reasons"][0]
    assert g2["status"] == "CRITICAL" and g2["lost"] is True
    for p in doc["problems"]:
        assert set(p) == {"severity", "gpu", "uuid", "check", "message"}
    assert {(p["gpu"], p["check"], p["severity"]) for p in doc["problems"]} == {
        (1, "thermal_throttle", "WARNING"), (2, "gpu_lost", "CRITICAL"),
        (2, "xid", "CRITICAL")}
