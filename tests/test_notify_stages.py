"""Each stage of the notification policy on its own (the policy composing them is
``tests/test_notify_policy.py``): identity, hold, mute, route and group, in Alertmanager's
order. Times are POSIX seconds of the policy's clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from watchdog.incident import Incident
from watchdog.notify import store as st
from watchdog.notify.base import Alert
from watchdog.notify.config import Inhibit, NotifyConfig, Route, SinkSpec
from watchdog.notify.stages.group import GroupStage
from watchdog.notify.stages.hold import FLEET_RECHECK_S, HoldStage
from watchdog.notify.stages.identity import IdentityStage
from watchdog.notify.stages.mute import MuteStage
from watchdog.notify.stages.route import RouteStage
from watchdog.notify.stages.state import AlertState
from watchdog.store import connect
from watchdog.store.store import Store

T0 = 1_800_000_000.0


def cfg(**kw: object) -> NotifyConfig:
    base: dict[str, object] = {
        "sinks": (SinkSpec("slack", "log", {}, "x"), SinkSpec("pd", "log", {}, "x")),
        "group_wait": 10.0, "group_interval": 60.0, "resolve_hold": 120.0}
    base.update(kw)
    return NotifyConfig(**base)  # type: ignore[arg-type]


def inc(kind: str = "comm_hang", gpus: tuple[str, ...] = ("0",), t: float = T0,
        severity: str = "critical", host: str = "node7") -> Incident:
    return Incident(kind=kind, severity=severity, host=host, gpus=list(gpus),
                    uuids=[f"GPU-{g}" for g in gpus], started_at=t - 30, fired_at=t,
                    resolved_at=None, rule=kind, summary=f"{kind} on {gpus}")


def alert(fp: str = "fp", kind: str = "comm_hang", gpus: tuple[str, ...] = ("0",),
          severity: str = "critical", job_id: str | None = None) -> Alert:
    return Alert(fingerprint=fp, status="firing", kind=kind, severity=severity,
                 host="node7", gpus=gpus, uuids=tuple(f"GPU-{g}" for g in gpus),
                 started_at=T0 - 30, fired_at=T0, resolved_at=None, rule=kind,
                 summary="s", job_id=job_id)


def node_scope(_rule: str) -> tuple[str, str | None]:
    return "node", "runbooks/x.md"


# --- 1. identity ----------------------------------------------------------------------------
def test_identity_is_fixed_when_first_seen_and_forgotten_at_resolve() -> None:
    asked: list[list[str]] = []

    def job_of(uuids: list[str]) -> tuple[str, str | None] | None:
        asked.append(uuids)
        return ("4242", "4242#0") if len(asked) == 1 else None

    stage = IdentityStage(cfg(), node_scope, job_of)
    hang = inc(gpus=("0", "1"))
    fp = stage.fingerprint(hang)
    hang.gpus.append("2")  # GPUs joining (or the job ending) change neither
    hang.uuids.append("GPU-2")
    assert stage.fingerprint(hang) == fp and stage.group(hang) == "node7/job=4242"
    assert stage.alert(hang, fp).gpus == ("0", "1", "2")
    assert asked == [["GPU-0", "GPU-1"]]  # the job was asked once
    stage.forget(hang)
    assert stage.fingerprint(hang) != fp  # resolved: seen anew (no job now)


def test_identity_gives_a_job_wide_kind_the_jobs_fingerprint() -> None:
    stage = IdentityStage(cfg(), node_scope, job_of=lambda _u: ("4242", "4242#0"))
    hang, xid = inc("comm_hang"), inc("xid")
    assert stage.fingerprint(hang).startswith("job-")
    assert not stage.fingerprint(xid).startswith("job-")
    assert stage.group(xid) == "node7/job=4242"  # both grouped with the job


def test_identity_survives_a_job_tracker_that_fails() -> None:
    def broken(_uuids: list[str]) -> tuple[str, str | None] | None:
        raise RuntimeError("tracker down")

    stage = IdentityStage(cfg(), node_scope, job_of=broken)
    assert not stage.fingerprint(inc()).startswith("job-")


def test_identity_alert_takes_the_configs_runbook_url() -> None:
    stage = IdentityStage(cfg(runbook_url="https://wiki/{kind}"), node_scope)
    hang = inc()
    assert stage.alert(hang, "fp").runbook_url == "https://wiki/comm_hang"
    assert IdentityStage(cfg(), node_scope).alert(hang, "fp").runbook_url == "runbooks/x.md"


# --- 2. hold --------------------------------------------------------------------------------
def test_hold_a_resolve_for_resolve_hold_and_a_refire_continues() -> None:
    alerts: dict[str, AlertState] = {}
    stage = HoldStage(cfg(), alerts)
    stage.fire("fp", alert(), "g", T0)
    hang = inc()
    hang.resolved_at = T0 + 100
    stage.resolve(alerts["fp"], hang, T0 + 100)
    stage.advance(T0 + 219)
    assert alerts["fp"].state == "resolving"
    stage.fire("fp", alert(), "g", T0 + 150)  # a re-fire inside the hold
    assert alerts["fp"].state == "firing" and alerts["fp"].alert.started_at == T0 - 30
    stage.resolve(alerts["fp"], hang, T0 + 200)
    stage.advance(T0 + 320)
    assert alerts["fp"].state == "resolved" and alerts["fp"].alert.status == "resolved"


def test_hold_a_flapping_alert_longer() -> None:
    alerts: dict[str, AlertState] = {}
    stage = HoldStage(cfg(flap_count=3, flap_hold=1800.0), alerts)
    hang = inc()
    for k in range(3):
        stage.fire("fp", alert(), "g", T0 + 300 * k)
        stage.resolve(alerts["fp"], hang, T0 + 300 * k + 60)
    assert alerts["fp"].hold_until == T0 + 660 + 1800


def test_hold_after_a_restart_for_restart_grace() -> None:
    alerts: dict[str, AlertState] = {}
    stage = HoldStage(cfg(restart_grace=600.0), alerts)
    stage.restored("a", alert("a"), "firing", "g", [T0], T0 + 5)
    stage.restored("b", alert("b"), "resolved", "g", [T0], T0 + 5)
    assert (alerts["a"].state, alerts["a"].hold_until) == ("resolving", T0 + 605)
    assert alerts["b"].state == "resolved" and not alerts["b"].dirty


def test_hold_a_job_wide_resolve_while_the_fleet_says_no() -> None:
    alerts: dict[str, AlertState] = {}
    answers: list[bool | None] = [False]
    stage = HoldStage(cfg(), alerts, job_clear=lambda _k, _j: answers[0])
    stage.fire("job-1", alert("job-1", job_id="4242"), "g", T0)
    stage.resolve(alerts["job-1"], inc(), T0 + 10)
    stage.advance(T0 + 130)
    assert alerts["job-1"].state == "resolving"
    assert alerts["job-1"].hold_until == T0 + 130 + FLEET_RECHECK_S
    answers[0] = None  # the fleet cannot say: not held
    stage.advance(T0 + 130 + FLEET_RECHECK_S)
    assert alerts["job-1"].state == "resolved"


# --- 3. mute --------------------------------------------------------------------------------
def state(a: Alert, st_: str = "firing") -> AlertState:
    return AlertState(a, st_, "g")  # type: ignore[arg-type]


def store(tmp: Path) -> Store:
    db = Store(tmp)
    db.migrate("notify", st.STEPS)  # the policy's own migrations, done here by hand
    return db


def test_mute_inhibits_other_kinds_on_a_lost_gpu_only(tmp_path: Path) -> None:
    stage = MuteStage(cfg(), store(tmp_path))
    lost = alert("lost", "gpu_lost", ("3",))
    same, other = alert("t3", "thermal_throttle", ("3",)), alert("t5", "thermal_throttle",
                                                                 ("5",))
    assert stage.muted([state(lost), state(same), state(other)], T0) == {"t3"}
    # a resolved source inhibits nothing
    assert stage.muted([state(lost, "resolved"), state(same)], T0) == set()


def test_mute_by_the_configs_inhibit_pair(tmp_path: Path) -> None:
    c = cfg(inhibit=(Inhibit(frozenset({"ecc"}), frozenset({"xid"})),))
    stage = MuteStage(c, store(tmp_path))
    ecc, xid, hot = alert("e", "ecc"), alert("x", "xid"), alert("h", "thermal_throttle")
    assert stage.muted([state(ecc), state(xid), state(hot)], T0) == {"x"}


def test_mute_by_a_silence_only_while_it_runs(tmp_path: Path) -> None:
    stage = MuteStage(cfg(), store(tmp_path))
    conn = st.open_store(connect(tmp_path))
    st.add_silence(conn, host=None, gpu="3", kind=None, starts_at=T0, ends_at=T0 + 60,
                   comment="swap", created_by="t")
    conn.close()
    a3, a35 = alert("a", gpus=("3",)), alert("b", gpus=("3", "5"))
    assert stage.muted([state(a3), state(a35)], T0 + 1) == {"a"}  # all its GPUs covered
    assert stage.muted([state(a3)], T0 + 61) == set()


# --- 4. route -------------------------------------------------------------------------------
def test_route_by_severity_first_match_wins() -> None:
    c = cfg(routes=(Route(sinks=("pd",), severity=frozenset({"critical"})),
                    Route(sinks=("slack",))))
    stage = RouteStage(c)
    crit, warn = state(alert("c")), state(alert("w", severity="warning"))
    assert stage.select([crit, warn], "pd") == [crit]
    assert stage.select([crit, warn], "slack") == [warn]


# --- 5. group -------------------------------------------------------------------------------
def test_group_waits_group_wait_then_group_interval_then_repeats() -> None:
    stage = GroupStage(cfg(repeat_interval=3600.0))
    a = state(alert("a"))
    assert stage.tick("g", "slack", [a], set(), T0, None) is None  # group_wait
    first = stage.tick("g", "slack", [a], set(), T0 + 10, None)
    assert first is not None and first.reason == "new" and first.changed == ("a",)
    b = state(alert("b", gpus=("1",)))
    assert stage.tick("g", "slack", [a, b], set(), T0 + 69, None) is None  # group_interval
    upd = stage.tick("g", "slack", [a, b], set(), T0 + 70, None)
    assert upd is not None and upd.reason == "update" and upd.changed == ("b",)
    assert stage.tick("g", "slack", [a, b], set(), T0 + 3669, None) is None
    rep = stage.tick("g", "slack", [a, b], set(), T0 + 3670, None)
    assert rep is not None and rep.reason == "repeat" and rep.changed == ()
    assert stage.tick("g", "slack", [a, b], set(), T0 + 3700, 20.0) is not None  # resend


def test_group_leaves_a_muted_alert_out_but_sends_its_resolve_once_told() -> None:
    stage = GroupStage(cfg(group_wait=0.0))
    a = state(alert("a"))
    assert stage.tick("g", "slack", [a], {"a"}, T0, None) is None  # muted from the start
    n = stage.tick("g", "slack", [a], set(), T0 + 1, None)
    assert n is not None and n.reason == "new"
    a.state = "resolved"
    a.alert = replace(a.alert, status="resolved", resolved_at=T0 + 90)
    res = stage.tick("g", "slack", [a], {"a"}, T0 + 100, None)  # muted, but was told
    assert res is not None and res.reason == "resolved"
    assert stage.groups[("g", "slack")].write == "delete"  # the group is over


def test_group_without_send_resolved_says_nothing_more_and_forgets() -> None:
    stage = GroupStage(cfg(group_wait=0.0, send_resolved=False))
    a = state(alert("a"))
    assert stage.tick("g", "slack", [a], set(), T0, None) is not None
    a.state = "resolved"
    assert stage.tick("g", "slack", [a], set(), T0 + 100, None) is None
    gs = stage.groups[("g", "slack")]
    assert gs.sent == {} and gs.write == "save"
