"""One engine: ``watchdog check`` judges with the rules ``run`` and ``replay`` use.

A threshold changed in a rule file changes the probe; ``check`` and ``replay`` of the same
simulated fault agree on its kind and severity; the probe's own XID classes are the rules'.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from watchdog.check import xid as check_xid
from watchdog.check.judge import Status, judge
from watchdog.check.rules import BURST_SIGNATURES, burst_rules, needs_time
from watchdog.cli import main
from watchdog.detect.loader import load_rules
from watchdog.detect.rows import codes_by_first
from watchdog.records import DeviceInfo, Sample

RULES = Path(__file__).resolve().parents[1] / "rules"
H100 = DeviceInfo(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3",
                  power_limit_enforced_w=700.0, clocks_max_sm_mhz=1980.0,
                  memory_total_mib=81559.0)
BUSY = {"utilization.gpu": 100.0, "utilization.memory": 45.0, "memory.total": 81559.0,
        "power.draw": 690.0, "enforced.power.limit": 700.0, "clocks.sm": 1755.0,
        "clocks_event_reasons.active": 4.0, "temperature.gpu": 62.0}


def _burst(values: dict, n: int = 4) -> dict[str, list[Sample]]:
    return {"GPU-0": [Sample(ts=1000.0 + 0.25 * k, uuid="GPU-0", index=0, values=dict(values))
                      for k in range(n)]}


def test_a_threshold_changed_in_the_rule_file_changes_the_probe(tmp_path):
    """throttle.yaml needs its thermal bits for half the time it looked (50 %); the same
    file edited to 100 % lets a burst with the bit on its last 2 of 3 weighed readings
    (the first weighs nothing) pass."""
    hot = {**BUSY, "clocks_event_reasons.active": 0x20}
    bursts = {"GPU-0": [Sample(ts=1000.0 + 0.25 * k, uuid="GPU-0", index=0,
                               values=dict(hot if k >= 2 else BUSY)) for k in range(4)]}
    shipped = judge([H100], bursts, host="n", checked_at=1001.0, rules=load_rules(None))
    assert [(p.check, p.severity) for p in shipped.problems] == [
        ("thermal_throttle", Status.WARNING)]
    edited = (RULES / "throttle.yaml").read_text().replace(
        "frac(sw_thermal or hw_thermal, 10s) >= 50%", "frac(sw_thermal or hw_thermal, 10s) >= 100%")
    assert edited != (RULES / "throttle.yaml").read_text()
    (tmp_path / "throttle.yaml").write_text(edited)
    v = judge([H100], bursts, host="n", checked_at=1001.0,
              rules=load_rules([tmp_path / "throttle.yaml"]))
    assert v.problems == []


def test_check_rules_option_uses_the_given_rule_file(tmp_path, capsys):
    """``watchdog check --rules FILE``: the probe's thresholds come from that file."""
    edited = (RULES / "throttle.yaml").read_text().replace("severity: warning",
                                                           "severity: critical")
    (tmp_path / "throttle.yaml").write_text(edited)
    rc = main(["check", "--json", "--source", "sim:thermal_throttle",
               "--rules", str(tmp_path / "throttle.yaml")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2 and {(p["check"], p["severity"]) for p in doc["problems"]} == {
        ("thermal_throttle", "CRITICAL")}


@pytest.mark.parametrize(("fault", "kind"), [
    ("thermal_throttle", "thermal_throttle"),
    ("hw_slowdown", "hw_slowdown"),
])
def test_check_and_replay_agree_on_kind_and_severity(capsys, fault, kind):
    """Before: check said CRITICAL for sim:thermal_throttle, replay said warning."""
    main(["check", "--json", "--source", f"sim:{fault}"])
    probe = json.loads(capsys.readouterr().out)
    main(["replay", f"sim:{fault}", "--duration", "10m", "--json"])
    replay = json.loads(capsys.readouterr().out)
    from_check = {(p["check"], p["severity"].lower()) for p in probe["problems"]}
    from_replay = {(i["kind"], i["severity"]) for i in replay["incidents"]}
    assert from_check == from_replay and {k for k, _ in from_check} == {kind}


def test_a_hang_stays_an_unconfirmed_warning_pointing_at_run(capsys):
    """comm_hang is critical in the rule; a burst cannot confirm it (checkpoint waits)."""
    rc = main(["check", "--json", "--source", "sim:comm_hang"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and {p["severity"] for p in doc["problems"]} == {"WARNING"}
    assert all("watchdog run" in p["message"] for p in doc["problems"])
    assert next(r for r in load_rules(None) if r.kind == "comm_hang").severity == "critical"


def test_burst_rules_drop_for_and_the_rules_that_need_time():
    rules = load_rules(None)
    burst = {r.name: r for r in burst_rules(rules)}
    assert all(r.for_s == 0 and r.learned is None and r.clear is None for r in burst.values())
    assert "comm_hang" in burst and "stall" not in burst and "straggler" not in burst
    assert {r.name for r in rules if not needs_time(r) or r.kind in BURST_SIGNATURES} == set(
        burst)


def test_xid_classes_are_the_rules():
    """The probe's CRITICAL XIDs are exactly rules/xid.yaml's xid_critical codes."""
    cond = next(r for r in load_rules(None) if r.name == "xid_critical").condition_src
    codes = {int(c) for c in re.search(r"xid in \(([^)]*)\)", cond).group(1).split(",")}
    codes |= {int(c) for c in re.findall(r"xid == (\d+)", cond)}  # 79: unless lost with it
    assert codes == set(check_xid.CRITICAL_CODES)
    assert all(check_xid.severity(c) == "CRITICAL" for c in (61, 62, 92))


@pytest.mark.parametrize("uuids", [
    ["b", "a", "c", "a", "b", "d"], ["x"], [], [f"GPU-{i % 7}" for i in (5, 3, 1) * 9],
])
def test_numpy_factorize_matches_pandas(uuids):
    arr = np.array(uuids, dtype=object)
    codes, uniq = codes_by_first(arr)
    want_codes, want_uniq = pd.factorize(arr)
    assert codes.tolist() == want_codes.tolist() and list(uniq) == list(want_uniq)
