"""The notification policy: grouping, GPUs joining, flapping, inhibition, silences,
routing, restarts and clocks that step back. Driven with the detector's own Incident
objects and a real SQLite state database; notifications are read from the outbox."""

from __future__ import annotations

import time
from pathlib import Path

from watchdog.incident import Incident
from watchdog.notify import store as st
from watchdog.notify.config import NotifyConfig, Route, SinkSpec
from watchdog.notify.policy import Policy
from watchdog.store import connect
from watchdog.store.store import Store

T0 = 1_800_000_000.0
SINKS: dict[str, float | None] = {"slack": None, "pd": None}  # name -> resend_interval


def cfg(**kw: object) -> NotifyConfig:
    base = {"sinks": (SinkSpec("slack", "log", {}, "x"), SinkSpec("pd", "log", {}, "x")),
            "group_wait": 10.0, "group_interval": 60.0, "resolve_hold": 120.0}
    base.update(kw)
    return NotifyConfig(**base)  # type: ignore[arg-type]


def info(rule: str) -> tuple[str, str | None]:
    return ("node" if rule in ("hang", "nvml_unavailable") else "gpu"), None


def inc(kind: str, gpus: list[str], t: float, rule: str | None = None,
        severity: str = "critical") -> Incident:
    return Incident(kind=kind, severity=severity, host="node7", gpus=gpus,
                    uuids=[f"GPU-{g}" for g in gpus], started_at=t - 30, fired_at=t,
                    resolved_at=None, rule=rule or kind, summary=f"{kind} on {gpus}",
                    evidence={"power": 105.0})


def policy(tmp: Path, c: NotifyConfig | None = None, now: float = T0) -> Policy:
    return Policy(c or cfg(), Store(tmp), "node7", info, now)


def run(p: Policy, start: float, end: float, step: float = 1.0) -> list:  # type: ignore[type-arg]
    out, t = [], start
    while t <= end:
        out += p.tick(t, SINKS)
        t += step
    return out


def outbox(tmp: Path, sink: str = "slack") -> list:  # type: ignore[type-arg]
    conn = connect(tmp)
    rows = conn.execute("SELECT doc FROM notify_outbox WHERE sink = ? ORDER BY id",
                        (sink,)).fetchall()
    conn.close()
    return [st.notification_from_json(r[0]) for r in rows]


def test_a_hang_on_8_gpus_is_one_notification_then_one_update_then_one_resolve(
        tmp_path: Path) -> None:
    p = policy(tmp_path)
    hang = inc("comm_hang", ["0", "1", "2", "3"], T0, rule="hang")
    p.observe([("firing", hang)], T0)
    assert run(p, T0, T0 + 9) == []  # group_wait
    first = run(p, T0 + 10, T0 + 10)
    assert [(n.sink, n.reason) for n in first] == [("slack", "new"), ("pd", "new")]
    fp = first[0].alerts[0].fingerprint
    hang.gpus += ["4", "5", "6", "7"]
    hang.uuids += ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    p.observe([("updated", hang)], T0 + 20)
    assert run(p, T0 + 20, T0 + 69) == []  # group_interval after the first
    upd = run(p, T0 + 70, T0 + 70)
    assert [n.reason for n in upd] == ["update", "update"]
    assert upd[0].alerts[0].fingerprint == fp and len(upd[0].alerts[0].gpus) == 8
    assert upd[0].changed == (fp,)
    hang.resolved_at = T0 + 100
    p.observe([("resolved", hang)], T0 + 100)
    assert run(p, T0 + 100, T0 + 219) == []  # resolve_hold
    res = run(p, T0 + 220, T0 + 400)
    assert [n.reason for n in res] == ["resolved", "resolved"]
    assert res[0].alerts[0].status == "resolved" and res[0].alerts[0].fingerprint == fp
    assert run(p, T0 + 400, T0 + 20_000, step=100) == []  # nothing after the end
    assert len(outbox(tmp_path)) == 3


def test_eight_thermal_incidents_are_one_notification_listing_eight(tmp_path: Path) -> None:
    p = policy(tmp_path)
    p.observe([("firing", inc("thermal_throttle", [str(g)], T0 + g, severity="warning"))
               for g in range(8)], T0)
    got = run(p, T0, T0 + 30)
    slack = [n for n in got if n.sink == "slack"]
    assert len(slack) == 1 and len(slack[0].alerts) == 8
    assert len({a.fingerprint for a in slack[0].alerts}) == 8


def test_flapping_for_an_hour_is_at_most_two_notifications(tmp_path: Path) -> None:
    p = policy(tmp_path)
    got = []
    for k in range(60):  # fires for 30 s, clear for 30 s, every minute for an hour
        t = T0 + 60 * k
        i = inc("thermal_throttle", ["3"], t, severity="warning")
        p.observe([("firing", i)], t)
        got += run(p, t, t + 29, step=1)
        i.resolved_at = t + 30
        p.observe([("resolved", i)], t + 30)
        got += run(p, t + 30, t + 59, step=1)
    got += run(p, T0 + 3600, T0 + 3600 + 3 * 3600, step=10)
    slack = [n for n in got if n.sink == "slack"]
    assert [n.reason for n in slack] == ["new", "resolved"]


def test_gpu_lost_mutes_other_kinds_on_that_gpu_only(tmp_path: Path) -> None:
    p = policy(tmp_path)
    p.observe([("firing", inc("gpu_lost", ["3"], T0)),
               ("firing", inc("thermal_throttle", ["3"], T0, severity="warning")),
               ("firing", inc("thermal_throttle", ["4"], T0, severity="warning"))], T0)
    n = next(x for x in run(p, T0, T0 + 20) if x.sink == "slack")
    assert sorted((a.kind, a.gpus) for a in n.alerts) == [
        ("gpu_lost", ("3",)), ("thermal_throttle", ("4",))]


def test_node_wide_nvml_error_mutes_everything_else(tmp_path: Path) -> None:
    p = policy(tmp_path)
    down = inc("nvml_error", [], T0, rule="nvml_unavailable")
    p.observe([("firing", down), ("firing", inc("ecc", ["1"], T0))], T0)
    n = next(x for x in run(p, T0, T0 + 20) if x.sink == "slack")
    assert [a.kind for a in n.alerts] == ["nvml_error"]


def test_a_silence_mutes_until_it_ends(tmp_path: Path) -> None:
    p = policy(tmp_path)
    conn = st.open_store(connect(tmp_path))
    wall = time.time()
    sid = st.add_silence(conn, host=None, gpu="3", kind="thermal_throttle", starts_at=wall,
                         ends_at=wall + 3600, comment="fan swap", created_by="t")
    p.observe([("firing", inc("thermal_throttle", ["3"], T0, severity="warning")),
               ("firing", inc("thermal_throttle", ["5"], T0, severity="warning"))], T0)
    n = [x for x in run(p, T0, T0 + 20) if x.sink == "slack"]
    assert [a.gpus for a in n[0].alerts] == [("5",)]
    assert st.expire_silence(conn, sid, wall + 1)
    p.mute._silences_at = -1e18  # the mute stage re-reads silences every 5 s of wall clock
    later = [x for x in run(p, T0 + 80, T0 + 80) if x.sink == "slack"]
    assert later and "GPU-3" in {u for a in later[0].alerts for u in a.uuids}


def test_routing_sends_warnings_to_slack_only(tmp_path: Path) -> None:
    c = cfg(routes=(Route(sinks=("pd", "slack"), severity=frozenset({"critical"})),
                    Route(sinks=("slack",))))
    p = policy(tmp_path, c)
    p.observe([("firing", inc("thermal_throttle", ["1"], T0, severity="warning"))], T0)
    assert [n.sink for n in run(p, T0, T0 + 20)] == ["slack"]
    p.observe([("firing", inc("xid", ["2"], T0 + 30))], T0 + 30)
    assert sorted(n.sink for n in run(p, T0 + 30, T0 + 120)) == ["pd", "slack"]


def test_a_restart_neither_repeats_a_page_nor_loses_a_resolve(tmp_path: Path) -> None:
    p = policy(tmp_path)
    p.observe([("firing", inc("comm_hang", ["0", "1"], T0, rule="hang"))], T0)
    assert len(run(p, T0, T0 + 20)) == 2
    p.db.close()
    # restart: the detector raises the same incident again 90 s later -> no new page
    p2 = policy(tmp_path, now=T0 + 60)
    again = inc("comm_hang", ["0", "1"], T0 + 150, rule="hang")
    assert run(p2, T0 + 60, T0 + 149) == []
    p2.observe([("firing", again)], T0 + 150)
    assert run(p2, T0 + 150, T0 + 2000, step=5) == []
    p2.db.close()
    # restart again, and this time the condition is gone: one resolve after the grace
    p3 = policy(tmp_path, now=T0 + 3000)
    got = run(p3, T0 + 3000, T0 + 3000 + 700, step=5)
    assert [n.reason for n in got] == ["resolved", "resolved"]


def test_a_clock_that_steps_back_loses_and_doubles_nothing(tmp_path: Path) -> None:
    p = policy(tmp_path)
    p.observe([("firing", inc("ecc", ["1"], T0 + 10_000))], T0 + 10_000)
    assert len(run(p, T0 + 10_000, T0 + 10_020)) == 2
    p.db.close()
    p2 = policy(tmp_path, now=T0)  # a simulated node starting over: stored times ahead
    again = inc("ecc", ["1"], T0 + 5)
    p2.observe([("firing", again)], T0 + 5)
    assert run(p2, T0, T0 + 300, step=5) == []  # same fingerprint: no second page
    again.resolved_at = T0 + 300
    p2.observe([("resolved", again)], T0 + 300)
    got = run(p2, T0 + 300, T0 + 700, step=5)
    assert [n.reason for n in got] == ["resolved", "resolved"]


def test_slow_flapping_is_damped_once_it_is_recognised(tmp_path: Path) -> None:
    """Fires 2 min, clear 3 min, for an hour: the resolve hold alone would send 24
    notifications; after the third firing within the flap window the resolve is held
    flap_hold (30 min), so the whole hour is 6."""
    p = policy(tmp_path)
    got = []
    for k in range(12):
        t = T0 + 300 * k
        i = inc("thermal_throttle", ["3"], t, severity="warning")
        p.observe([("firing", i)], t)
        got += run(p, t, t + 119, step=1)
        i.resolved_at = t + 120
        p.observe([("resolved", i)], t + 120)
        got += run(p, t + 120, t + 299, step=1)
    got += run(p, T0 + 3600, T0 + 3 * 3600, step=10)
    reasons = [n.reason for n in got if n.sink == "slack"]
    assert reasons == ["new", "resolved", "new", "resolved", "new", "resolved"]


def test_incidents_the_caller_drops_never_share_a_fingerprint(tmp_path: Path) -> None:
    """Found by bench/alerting_bench.py: fingerprints were cached by id(incident), and
    Python reuses the id of a freed object, so a new incident could inherit a dropped
    one's fingerprint and replace its alert."""
    p = policy(tmp_path)
    for g in range(6):
        i = inc("ecc", [str(g)], T0)
        i.host = f"node{g}"
        p.observe([("firing", i)], T0)
        del i
    assert sorted(a.alert.host for a in p.alerts.values()) == [f"node{g}" for g in range(6)]
