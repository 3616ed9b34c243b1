"""One page per job: a job-wide incident's identity is the job's, the same on every node
(PagerDuty's dedup_key, Alertmanager's labels), it survives restarts and flaps, and the
shared incident resolves only when the fleet says the job is clear."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from watchdog.incident import Incident
from watchdog.notify import store as st
from watchdog.notify.config import NotifyConfig, SinkSpec
from watchdog.notify.policy import FLEET_HOLD_MAX_S, JobClear, Policy
from watchdog.notify.sinks.alertmanager import am_alert
from watchdog.notify.sinks.pagerduty import payload
from watchdog.service.fleet import FleetView, query_for
from watchdog.store import connect
from watchdog.store.store import Store
from watchdog.testing.httpserver import Reply, Request, Server

T0 = 1_800_000_000.0
SINKS: dict[str, float | None] = {"pd": None}  # name -> resend_interval
JOB = ("4242", "4242#0")


def cfg() -> NotifyConfig:
    return NotifyConfig(sinks=(SinkSpec("pd", "log", {}, "x"),), group_wait=10.0,  # type: ignore[call-arg]
                        group_interval=60.0, resolve_hold=120.0)


def info(rule: str) -> tuple[str, str | None]:
    return ("gpu" if rule == "xid" else "node"), None


def inc(kind: str, host: str, gpus: list[str], t: float = T0) -> Incident:
    return Incident(kind=kind, severity="critical", host=host, gpus=gpus,
                    uuids=[f"{host}-GPU-{g}" for g in gpus], started_at=t - 150, fired_at=t,
                    resolved_at=None, rule=kind, summary=f"{kind} on {host}",
                    evidence={"power": 105.0})


def policy(tmp: Path, host: str, job: tuple[str, str] | None = JOB, now: float = T0,
           job_clear: JobClear | None = None) -> Policy:
    return Policy(cfg(), Store(tmp / host), host, info, now, job_of=lambda _uuids: job,
                  job_clear=job_clear)


def fire(p: Policy, i: Incident, t: float = T0) -> list:  # type: ignore[type-arg]
    p.observe([("firing", i)], t)
    return p.tick(t, SINKS) + p.tick(t + 10, SINKS)


def outbox(tmp: Path, host: str) -> list:  # type: ignore[type-arg]
    conn = connect(tmp / host)
    rows = conn.execute("SELECT doc FROM notify_outbox ORDER BY id").fetchall()
    conn.close()
    return [st.notification_from_json(r[0]) for r in rows]


def test_every_node_of_a_hung_job_has_the_same_identity(tmp_path: Path) -> None:
    fps = set()
    for host in ("node1", "node2", "node64"):
        [n] = fire(policy(tmp_path, host), inc("comm_hang", host, ["0", "1", "2"]))
        [a] = n.alerts
        assert a.job_id == "4242" and a.host == host
        fps.add(a.fingerprint)
        assert n.group_key.startswith(f"{host}/job=4242#")
    assert len(fps) == 1 and next(iter(fps)).startswith("job-")
    stall = fire(policy(tmp_path, "node9"), inc("stall", "node9", ["0"]))[0].alerts[0]
    assert stall.fingerprint.startswith("job-") and stall.fingerprint not in fps


def test_another_run_or_job_is_another_identity_and_no_job_is_the_nodes(
        tmp_path: Path) -> None:
    a = fire(policy(tmp_path, "n1"), inc("comm_hang", "n1", ["0"]))[0].alerts[0]
    b = fire(policy(tmp_path, "n2", job=("4242", "4242#1")),
             inc("comm_hang", "n2", ["0"]))[0].alerts[0]
    c = fire(policy(tmp_path, "n3", job=("77", "77#0")),
             inc("comm_hang", "n3", ["0"]))[0].alerts[0]
    d = fire(policy(tmp_path, "n4", job=None), inc("comm_hang", "n4", ["0"]))[0].alerts[0]
    e = fire(policy(tmp_path, "n5", job=None), inc("comm_hang", "n5", ["0"]))[0].alerts[0]
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert not d.fingerprint.startswith("job-") and d.fingerprint != e.fingerprint
    assert d.job_id is None


def test_a_per_gpu_kind_stays_the_nodes_but_carries_the_job(tmp_path: Path) -> None:
    a = fire(policy(tmp_path, "n1"), inc("xid", "n1", ["3"]))[0].alerts[0]
    b = fire(policy(tmp_path, "n2"), inc("xid", "n2", ["3"]))[0].alerts[0]
    assert a.fingerprint != b.fingerprint and not a.fingerprint.startswith("job-")
    assert a.job_id == "4242" and a.scope == "gpu"
    labels = am_alert(a, T0)["labels"]
    assert (labels["node"], labels["job_id"], labels["gpu"]) == ("n1", "4242", "3")
    hang = fire(policy(tmp_path, "n3"), inc("comm_hang", "n3", ["0", "1"]))[0].alerts[0]
    hl = am_alert(hang, T0)["labels"]
    assert "gpu" not in hl and hl["node"] == "n3" and hl["job_id"] == "4242"
    assert hl["fingerprint"] == hang.fingerprint  # the same on every node; node tells them apart


def test_pagerduty_gets_the_jobs_dedup_key_and_the_node_in_the_details(
        tmp_path: Path) -> None:
    a = fire(policy(tmp_path, "n7"), inc("comm_hang", "n7", ["0"]))[0].alerts[0]
    pl = payload(a, T0)
    assert pl["custom_details"]["job"] == "4242" and pl["custom_details"]["node"] == "n7"
    assert pl["group"] == "4242"


def test_the_identity_survives_a_restart_and_a_flap(tmp_path: Path) -> None:
    p = policy(tmp_path, "n1")
    hang = inc("comm_hang", "n1", ["0", "1"])
    [first] = fire(p, hang)
    fp = first.alerts[0].fingerprint
    # a restart: the detector raises the same hang again (a new Incident object)
    q = policy(tmp_path, "n1", now=T0 + 60)
    again = inc("comm_hang", "n1", ["0", "1"], t=T0 + 70)
    q.observe([("firing", again)], T0 + 70)
    assert q.tick(T0 + 80, SINKS) == []  # continues: nothing new to say
    assert set(q.alerts) == {fp}
    # a flap: it clears and fires again inside resolve_hold
    again.resolved_at = T0 + 100
    q.observe([("resolved", again)], T0 + 100)
    q.tick(T0 + 110, SINKS)
    flap = inc("comm_hang", "n1", ["0", "1"], t=T0 + 150)
    q.observe([("firing", flap)], T0 + 150)
    assert q.tick(T0 + 160, SINKS) == [] and q.alerts[fp].state == "firing"


def _resolve(p: Policy, i: Incident, t: float) -> None:
    i.resolved_at = t
    p.observe([("resolved", i)], t)


def test_a_resolve_waits_while_the_fleet_says_other_nodes_are_still_hung(
        tmp_path: Path) -> None:
    answers: list[bool | None] = [False]
    asked: list[tuple[str, str]] = []

    def clear(kind: str, job: str) -> bool | None:
        asked.append((kind, job))
        return answers[0]

    p = policy(tmp_path, "n1", job_clear=clear)
    hang = inc("comm_hang", "n1", ["0"])
    fire(p, hang)
    _resolve(p, hang, T0 + 100)
    t = T0 + 100
    while t < T0 + 1000:  # resolve_hold is 120 s; the fleet says no for 15 min
        assert p.tick(t, SINKS) == []
        t += 5
    assert asked[-1] == ("comm_hang", "4242")
    answers[0] = True
    out = []
    while not out and t < T0 + 1100:
        out = p.tick(t, SINKS)
        t += 5
    assert [n.reason for n in out] == ["resolved"]
    assert out[0].alerts[0].status == "resolved"


def test_an_unknown_fleet_or_a_long_hold_resolves_anyway(tmp_path: Path) -> None:
    p = policy(tmp_path, "n1", job_clear=lambda _k, _j: None)  # Prometheus does not answer
    hang = inc("comm_hang", "n1", ["0"])
    fire(p, hang)
    _resolve(p, hang, T0 + 100)
    assert [n.reason for n in p.tick(T0 + 221, SINKS)] == ["resolved"]
    # the fleet says "still hung" forever
    q = policy(tmp_path, "n2", job_clear=lambda _k, _j: False)
    h2 = inc("comm_hang", "n2", ["0"])
    fire(q, h2)
    _resolve(q, h2, T0 + 100)
    t, out = T0 + 100, []
    while not out:
        out = q.tick(t, SINKS)
        t += 15
    assert T0 + 100 + FLEET_HOLD_MAX_S <= t <= T0 + 100 + FLEET_HOLD_MAX_S + 30
    # no job: never asks the fleet
    per_node = policy(tmp_path, "n3", job=None, job_clear=lambda _k, _j: False)
    h3 = inc("comm_hang", "n3", ["0"])
    fire(per_node, h3)
    _resolve(per_node, h3, T0 + 100)
    assert [n.reason for n in per_node.tick(T0 + 221, SINKS)] == ["resolved"]


def test_the_fleet_view_asks_prometheus_about_the_other_nodes_of_the_job() -> None:
    seen: list[str] = []
    others = {"n": 2}

    def prometheus(req: Request) -> Reply:
        import urllib.parse

        q = urllib.parse.parse_qs(urllib.parse.urlsplit(req.path).query)["query"][0]
        seen.append(q)
        result = [{"metric": {}, "value": [T0, str(others["n"])]}] if others["n"] else []
        return Reply(200, {"status": "success", "data": {"resultType": "vector",
                                                         "result": result}})

    now = [0.0]
    with Server(handler=prometheus) as srv:
        view = FleetView(srv.url, "node7", wall=lambda: now[0])
        assert view.job_clear("comm_hang", "4242") is None  # not asked yet
        view.poll()
        assert view.job_clear("comm_hang", "4242") is False
        others["n"] = 0
        view.poll()
        assert view.job_clear("comm_hang", "4242") is True
        now[0] = 120.0  # the answer went stale
        assert view.job_clear("comm_hang", "4242") is None
        assert view.job_clear("xid", "4242") is None  # not a job-wide kind
    assert seen[0] == query_for("comm_hang", "4242", "node7")
    assert 'node!="node7"' in seen[0] and 'job_id="4242"' in seen[0]


def test_a_prometheus_that_fails_is_no_answer() -> None:
    with Server(Reply(500, {"status": "error"})) as srv:
        view = FleetView(srv.url, "node7")
        view.job_clear("comm_hang", "4242")
        view.poll()
        assert view.job_clear("comm_hang", "4242") is None
        assert "HTTP 500" in (view.error or "")
    dead = FleetView("http://127.0.0.1:9", "node7", timeout=1.0)
    dead.job_clear("stall", "1")
    dead.poll()
    assert dead.job_clear("stall", "1") is None and dead.error


def test_a_stored_alert_keeps_its_job(tmp_path: Path) -> None:
    a = fire(policy(tmp_path, "n1"), inc("comm_hang", "n1", ["0"]))[0].alerts[0]
    back = st.alert_from_json(st.alert_to_json(a))
    assert back == a
    old = json.loads(st.alert_to_json(a))
    del old["scope"]  # an alert stored by an earlier version
    assert st.alert_from_json(json.dumps(old)) == replace(a, scope="node")
