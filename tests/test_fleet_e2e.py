"""A simulated fleet, end to end, on loopback: real agents, a real Prometheus with the
shipped fleet rules, a real Alertmanager with the documented route and inhibitions, the
real PagerDuty sink against a TLS stand-in.

Job A runs on four nodes: the ranks of fleet-a4 crash (its GPUs go idle, its processes
exit) and the other three hang in the collective. Job B trains on two other nodes. Every
node pages PagerDuty directly and posts to Alertmanager. Expected: one PagerDuty incident
for job A (three nodes, one dedup_key), one Alertmanager notification, JobHangCulprit
naming fleet-a4 (the nodes' own comm_hang alerts inhibited), nothing about job B. When
the job restarts, fleet-a3 stays hung longer than the others: the shared PagerDuty
incident resolves only after fleet-a3 cleared (the nodes ask Prometheus first).

Time: the agents run at 30x, Prometheus scrapes and evaluates every second, the hang
rules' ``for:`` is 4 s and Alertmanager's timers are 0.15 of the documented ones. The
crashed ranks come back when the others' hang ends (the job restarted), 12 simulated
minutes later, so the run also shows every page resolving.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from test_dashboard import exported as exported_dashboard
from test_dashboard import queries as dashboard_queries

from watchdog.testing.fleet import (
    Fleet,
    Node,
    fleet_rules,
    free_port,
    missing_binaries,
    pagerduty_incidents,
)
from watchdog.testing.httpserver import Reply, Server, self_signed_cert

pytestmark = pytest.mark.slow
SPEED = 30
HANG = "comm_hang(for=12m)@2m"
LONGER = "comm_hang(for=16m)@2m"  # fleet-a3: clear 4 simulated minutes after the others


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the PagerDuty stand-in's certificate)")
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def test_a_job_hang_across_nodes_is_one_page_naming_the_node_that_caused_it(
        tmp_path: Path, tls: tuple[str, str]) -> None:
    why = missing_binaries()
    if why:
        pytest.skip(why)
    (tmp_path / "pd.key").write_text("abcdef0123456789abcdef0123456789\n")
    (tmp_path / "pd.key").chmod(0o600)
    fleet = Fleet(tmp_path)
    fleet.nodes = [Node(f"fleet-a{k}", f"sim:node(id={k}),{hang}", free_port())
                   for k, hang in ((1, HANG), (2, HANG), (3, LONGER))]
    fleet.nodes.append(Node("fleet-a4", "sim:node(id=4),rank_crash(for=12m)@2m", free_port()))
    with Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=tls) as pd, \
            Server() as receiver:
        try:
            am = fleet.start_alertmanager(f"{receiver.url}/alertmanager", scale=0.15)
            healthy = [Node(f"fleet-b{k}", f"sim:node(id={k}),healthy", free_port())
                       for k in (1, 2)]
            fleet.nodes += healthy
            fleet.start_prometheus(fleet_rules(for_s=4))
            sinks = (f"    pagerduty: {{type: pagerduty, routing_key_file: {tmp_path / 'pd.key'},"
                     f" url: \"{pd.url}\", ca_file: {tls[0]}}}\n"
                     f"    am: {{type: alertmanager, url: \"{am}\"}}\n")
            notify = "  group_wait: 10s\n"
            a_nodes, b_nodes = fleet.nodes[:4], fleet.nodes[4:]
            fleet.nodes = a_nodes
            fleet.start_agents(speed=SPEED, duration="22m", sinks=sinks, notify=notify, seed=7,
                               ask_prometheus=True)
            fleet.nodes = b_nodes
            fleet.start_agents(speed=SPEED, duration="22m", sinks=sinks, notify=notify, seed=11,
                               ask_prometheus=True)
            fleet.nodes = a_nodes + b_nodes
            codes = fleet.wait_agents(timeout=120)
            time.sleep(2.0)  # the last resolves reach Alertmanager's receiver
            series = fleet.query('count(last_over_time({__name__=~"watchdog_.*|process_.*", '
                                 'node="fleet-b1"}[1m]))')
            # the shipped Grafana dashboard: every panel's and annotation's query, with its
            # variables at "All", over the run (a panel showing the last 10 minutes)
            empty = [name for name, expr in dashboard_queries(exported_dashboard())
                     if not fleet.query(f"last_over_time(({expr})[10m:1s])")]
        finally:
            fleet.close()
    logs = {n.host: n.log.read_text() for n in fleet.nodes if n.log}
    assert codes == [0] * 6, logs
    assert empty == [], f"dashboard queries without data: {empty}"
    assert not any("Traceback" in t for t in logs.values()), logs
    # PagerDuty: the three hung nodes of job A, one dedup_key: one incident
    events = [(r.body["event_action"], r.body["dedup_key"]) for r in pd.requests]
    triggers = {k for a, k in events if a == "trigger"}
    assert len(triggers) == 1, events
    assert pagerduty_incidents(events) == 1, events
    assert events[-1][0] == "resolve", events  # and it resolved when the hang ended
    first_resolve = min(r.at for r in pd.requests if r.body["event_action"] == "resolve")
    assert first_resolve > _resolved_at(logs["fleet-a3"]), \
        "the incident resolved before the job's last hung node cleared"
    assert _resolved_at(logs["fleet-a1"]) < _resolved_at(logs["fleet-a3"]) - 3
    nodes_paging = {r.body["payload"]["custom_details"]["node"] for r in pd.requests
                    if r.body["event_action"] == "trigger"}
    assert nodes_paging == {"fleet-a1", "fleet-a2", "fleet-a3"}
    assert {r.body["payload"]["custom_details"]["job"] for r in pd.requests
            if r.body["event_action"] == "trigger"} == {_job_of(logs)}
    # Alertmanager: one firing notification, the culprit, from the fleet rules
    firing = [r.body for r in receiver.requests if r.body.get("status") == "firing"]
    assert len(firing) == 1, [(b["groupLabels"], [a["labels"] for a in b["alerts"]])
                              for b in firing]
    [alert] = firing[0]["alerts"]
    assert alert["labels"]["alertname"] == "JobHangCulprit"
    assert alert["labels"]["node"] == "fleet-a4"
    assert alert["labels"]["job_id"] == _job_of(logs)
    assert "fleet-a4 is the odd node out: GPU 0 idle" in alert["annotations"]["summary"]
    assert not any("fleet-b" in str(r.body) for r in receiver.requests)
    # the cardinality budget holds on a live node
    from watchdog.service.metrics import budget

    assert series and int(series[0]["value"][1]) <= budget(8, 2)


def _resolved_at(log: str) -> float:
    """Wall time of the node's comm_hang resolving (its log line's stamp)."""
    import datetime as dt

    line = next(ln for ln in log.splitlines() if "RESOLVED" in ln and "comm_hang" in ln)
    return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _job_of(logs: dict[str, str]) -> str:
    """Job A's Slurm job id, as the simulator gives it for seed 7."""
    from watchdog.sources.sim.job import TrainingJob
    from watchdog.sources.sim.models import get_model

    return TrainingJob(get_model("h100-sxm"), 8, 7).slurm_job_id
