"""The Slurm pieces that need no cluster: the reason the agent writes, reading
``scontrol show node``, the config, a timeout on a scontrol that never answers, the
``agent`` kind, and the status lines. The behaviour against a real Slurm is
``test_slurm_e2e.py``."""

from __future__ import annotations

import pytest

from watchdog.errors import InputError
from watchdog.incident import Incident
from watchdog.service.scontrol import (
    MAX_REASON,
    Scontrol,
    ScontrolError,
    is_ours,
    parse_node,
    reason_text,
)
from watchdog.service.slurm import SlurmActor, SlurmConfig, parse_config
from watchdog.service.status import render

# as Slurm 22.05's `scontrol show node vm --oneliner` prints them
DRAINED = ("NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
           "State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
           "Partitions=debug ExtSensorsTemp=n/s Reason=admin: fan [root@2026-11-28T21:40:42]")
IDLE = ("NodeName=vm Arch=x86_64 CoresPerSocket=1 State=IDLE+NOT_RESPONDING "
        "ThreadsPerCore=1 CurrentWatts=0 AveWatts=0 ExtSensorsTemp=n/s")


def test_the_reason_is_one_printable_line_without_quotes_and_bounded():
    text = reason_text('watchdog: ecc GPU 3: "bad"\nrow `remap` pending; café ' + "x" * 400)
    assert text.startswith("watchdog: ecc GPU 3: bad row remap pending; caf")
    assert len(text) == MAX_REASON and text.endswith("...")
    assert text.isascii() and text.isprintable()
    assert not set(text) & set("\"'`\n\r\t")


def test_show_node_gives_state_and_reason_without_slurms_stamp():
    st = parse_node(DRAINED)
    assert (st.state, st.reason, st.drained) == ("IDLE+DRAIN", "admin: fan", True)
    st = parse_node(IDLE)
    assert (st.reason, st.drained) == (None, False)
    assert parse_node("NodeName=n State=MIXED+DRAIN Reason=watchdog: xid GPU 1: "
                      "XID 79 [root@2026-01-01T00:00:00]").reason == "watchdog: xid GPU 1: XID 79"
    with pytest.raises(ScontrolError):
        parse_node("Node vm not found")


def test_only_a_watchdog_reason_is_the_agents():
    assert is_ours("watchdog: gpu_lost GPU 2: lost")
    assert not is_ours("admin: watchdog: fan") and not is_ours(None) and not is_ours("")


@pytest.mark.parametrize(("value", "error"), [
    ({"drain": ["agent"]}, "'agent' never drains"),
    ({"drain": ["gpu_los"]}, "unknown kind 'gpu_los'"),
    ({"hold_down": "8d"}, "slurm.hold_down"),
    ({"timeout": "0s"}, "slurm.timeout"),
    ({"dry_run": "yes"}, "slurm.dry_run must be true or false"),
    ({"node": "two words"}, "slurm.node"),
    ({"drian": []}, "slurm must be a mapping"),
])
def test_a_bad_slurm_config_is_one_line(value, error):
    with pytest.raises(InputError, match=error):
        parse_config(value, "w.yaml:3")


def test_the_default_drain_set_and_hold_down():
    cfg = parse_config({}, "w.yaml:3")
    assert cfg == SlurmConfig()
    assert cfg.drain == {"gpu_lost", "ecc", "xid"} and cfg.hold_down_s == 900.0
    assert parse_config({"drain": ["hw_slowdown"], "hold_down": "0s"}, "x").drain == \
        {"hw_slowdown"}


def test_a_scontrol_that_never_answers_is_killed_at_its_timeout(tmp_path):
    hang = tmp_path / "scontrol"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    with pytest.raises(ScontrolError, match="did not answer within 1 s"):
        Scontrol(str(hang), "vm", 1.0).show()
    with pytest.raises(ScontrolError, match="cannot run /no/such/scontrol"):
        Scontrol("/no/such/scontrol", "vm", 1.0).drain("watchdog: x")


def incident(kind: str, severity: str = "critical") -> Incident:
    return Incident(kind=kind, severity=severity, host="n", gpus=["1"], uuids=["GPU-1"],
                    started_at=10.0, fired_at=10.0, resolved_at=None, rule=kind,
                    summary="s")


def test_only_critical_incidents_of_the_drain_kinds_hold_a_drain(tmp_path):
    actor = SlurmActor(SlurmConfig(drain=frozenset({"ecc", "agent"})), now=lambda: 0.0,
                       judging=lambda: True, node="n")
    for inc in (incident("agent"), incident("ecc", "warning"), incident("comm_hang")):
        actor("firing", inc)
    assert actor._holding == {}
    actor("firing", incident("ecc"))
    assert list(actor._holding) == ["ecc/GPU-1"]


def test_status_shows_the_drain_and_the_last_actions():
    doc = {"host": "n17", "interval_s": 1.0, "slurm": {
        "node": "n17", "drained": {"reason": "watchdog: ecc", "at": 0}, "drains": 1,
        "resumes": 0, "hold_down_s": 900, "dry_run": False, "judging": True,
        "actions": [{"at": 0, "action": "drain", "detail": "watchdog: ecc GPU 1: x",
                     "dry_run": False}]}}
    text = render(doc, 0.0)
    assert "slurm: node n17 DRAINED by the agent · 1 drains, 0 resumes · hold-down 15m00s" \
        in text
    assert "drain: watchdog: ecc GPU 1: x" in text
