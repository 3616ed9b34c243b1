"""What ``watchdog check`` prints: the Nagios line, the per-GPU table, colour rules, JSON."""

from __future__ import annotations

import io
import json
import re

from watchdog import reasons
from watchdog.check import report, table
from watchdog.check.judge import judge
from watchdog.records import DeviceInfo, Sample, XidEvent

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
    out = table.render(_verdict(), width=120)
    lines = out.splitlines()
    assert lines[0].startswith("WATCHDOG CRITICAL - GPU 2 gpu_lost: GPU is lost")
    assert "driver 565.57.01" in lines[1] and "3 GPUs (expected 3)" in lines[1]
    row0 = next(ln for ln in lines if ln.lstrip().startswith("0 "))
    assert "pwrcap,sync" in row0 and "H100 80GB HBM3" in row0
    assert "690/700 W" in row0 and "1755 MHz" in row0 and "74.2/79.6 GiB" in row0
    assert row0.rstrip().endswith("OK")
    row1 = next(ln for ln in lines if ln.lstrip().startswith("1 "))
    assert "SWtherm" in row1 and "WARNING" in row1 and row1.endswith("thermal_throttle")
    row2 = next(ln for ln in lines if ln.lstrip().startswith("2 "))
    assert "CRITICAL" in row2 and row2.endswith("gpu_lost, xid")
    assert ("clock events: pwrcap = SW power cap, sync = sync boost, SWtherm = SW thermal "
            "slowdown") in out
    assert "  CRITICAL GPU 2: XID 79 (GPU has fallen off the bus)" in lines
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
    coloured = table.render(_verdict(), color=True, width=120)
    assert "\033[1;31mCRITICAL" in coloured
    assert re.sub(r"\033\[[0-9;]*m", "", coloured) == table.render(_verdict(), width=120)


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


# --- clarity (issue 16): each problem said once, a table that fits a terminal -------------
def _thermal(index: int = 7, extra: int = 0) -> Sample:
    mask = (reasons.HW_SLOWDOWN | reasons.SYNC_BOOST | reasons.SW_THERMAL
            | reasons.HW_THERMAL | extra)
    return _sample(index, **{"clocks_event_reasons.active": float(mask),
                             "temperature.gpu": 89.0})


def _rule_problem(gpu: int, check: str, message: str):
    from watchdog.check.judge import Problem, Status

    return Problem(Status.WARNING, check, message, gpu, f"GPU-{gpu}")


def test_clarity_a_problem_names_its_gpu_and_kind_once():
    """clarity: `GPU 7: thermal_throttle: GPU 7 thermal slowdown` names the GPU twice and
    the kind twice; the check says `GPU 7 thermal_throttle: thermal slowdown: 89 C`."""
    p = _rule_problem(7, "thermal_throttle",
                      "thermal_throttle: GPU 7 thermal slowdown: 89 C (HBM 95 C), 235 W")
    assert table.problem_text(p) == ("GPU 7 thermal_throttle",
                                     "thermal slowdown: 89 C (HBM 95 C), 235 W")
    xid = _rule_problem(2, "xid", "XID 79 (GPU has fallen off the bus)")
    assert table.problem_text(xid) == ("GPU 2", "XID 79 (GPU has fallen off the bus)")
    nvml = _rule_problem(3, "nvml_error", "nvml_error: GPU 3: NVML calls keep failing")
    assert table.problem_text(nvml) == ("GPU 3 nvml_error", "NVML calls keep failing")
    from watchdog.check.judge import Verdict

    v = Verdict(host="n", checked_at=0.0, gpus=[], problems=[p])
    out = table.render(v, width=120)
    assert out.splitlines()[0] == ("WATCHDOG WARNING - GPU 7 thermal_throttle: thermal "
                                   "slowdown: 89 C (HBM 95 C), 235 W")
    assert "  WARNING GPU 7 thermal_throttle: thermal slowdown: 89 C (HBM 95 C), 235 W" in out
    for text in (out, table.status_line(v)):
        assert "GPU 7: " not in text and "thermal_throttle: GPU 7" not in text
        assert text.count("GPU 7") == text.count("GPU 7 thermal_throttle")


def test_clarity_a_job_wide_finding_is_one_line_not_one_per_gpu():
    """clarity: a hung job on 8 GPUs is one problem line on `GPUs 0-7`, not 8 copies."""
    from watchdog.check.judge import Verdict

    ps = [_rule_problem(g, "comm_hang", "comm_hang condition holds now (unconfirmed): job "
                                        "looks hung") for g in range(8)]
    v = Verdict(host="n", checked_at=0.0, gpus=[], problems=ps)
    out = table.render(v, width=120).splitlines()
    assert out[0] == ("WATCHDOG WARNING - GPUs 0-7: comm_hang condition holds now "
                      "(unconfirmed): job looks hung")
    assert [ln for ln in out if ln.startswith("  WARNING")] == [
        "  WARNING GPUs 0-7: comm_hang condition holds now (unconfirmed): job looks hung"]


def test_clarity_the_table_fits_120_columns_and_the_row_holds_no_problem_text():
    """clarity: a `watchdog check` row of a throttled GPU was 260 columns wide; rows fit
    120 columns, clock-event reasons are short codes with a legend, and the problem's long
    text is only under `problems:`."""
    bursts = {f"GPU-{i}": [_sample(i)] for i in range(2)}
    bursts["GPU-2"] = [_thermal(2, reasons.HW_POWER_BRAKE | reasons.SW_POWER_CAP)]
    v = judge(DEV, bursts, host="node-7", checked_at=1_750_000_000.0, duration_s=1.0)
    long = "x" * 200
    extra = _rule_problem(2, "some_very_long_kind_name_here", long)
    v.gpus[2].problems.append(extra)
    v.problems.append(extra)
    for width in (120, 100):
        out = table.render(v, width=width)
        lines = out.splitlines()
        head = lines.index(next(ln for ln in lines if ln.startswith("GPU  Model")))
        rows = lines[head:head + 4]
        assert all(len(ln) <= width for ln in rows), [len(ln) for ln in rows]
        assert all(long[:20] not in ln for ln in rows)
        assert any(ln.startswith("clock events: ") for ln in lines)
        assert all(len(ln) <= max(40, width) for ln in lines if "clock events" in ln)
        assert f"  WARNING GPU 2 some_very_long_kind_name_here: {long}" in lines
    wide = table.render(v, width=200)
    row2 = next(ln for ln in wide.splitlines() if ln.lstrip().startswith("2 "))
    assert "pwrcap,HWslow,sync,SWtherm,HWtherm,brake" in row2  # room: all of them
    narrow = table.render(v, width=120)
    row2 = next(ln for ln in narrow.splitlines() if ln.lstrip().startswith("2 "))
    assert "HWslow" in row2 and "brake" in row2  # the unusual ones stay


def test_clarity_table_width_is_120_off_a_terminal_and_the_terminal_width_on_one(monkeypatch):
    """clarity: piped or under Nagios the table is at most 120 columns; on a terminal it
    uses the terminal's width."""
    import os

    assert table.table_width(io.StringIO()) == 120
    monkeypatch.setattr("shutil.get_terminal_size", lambda fallback=(80, 24):
                        os.terminal_size((160, 50)))
    assert table.table_width(_Tty()) == 160
