"""Writes ``fleet_test.yml`` beside it: the promtool unit tests of the shipped fleet rules
(``rules/prometheus/fleet.yml``). Run ``python tests/prometheus/make_fleet_test.py`` after
changing the cases; ``tests/test_fleet_rules.py`` runs ``promtool test rules`` on the file
and checks it is what this script writes.

The series are what agents export (labels node, gpu, uuid, job_id, plus the target's
instance and job), sampled every 10 s for 400 s: hung nodes from 30 s on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
OUT = HERE / "fleet_test.yml"
HUNG = "0x3 1x37"  # in a firing comm_hang from 30 s on
SPIN = "0.03x40"  # power at its idle level
CRASHED = {"util": "1x2 0x37", "busy": "0.9x2 -0.02x37", "watts": "600x2 70x37"}
Series = list[dict[str, str]]


def gpu(node: str, index: int, job: str, *, hang: str = "0x40", lost: str = "0x40",
        fault: str = "0x40", stall: str = "0x40", util: str = "1x40", busy: str = "0.9x40",
        watts: str = "600x40", sm: str | None = None) -> Series:
    lab = (f'node="{node}",gpu="{index}",uuid="GPU-{node}-{index}",job_id="{job}",'
           f'instance="{node}:9849",job="nvml-watchdog"')
    values = (("watchdog_gpu_hang", hang), ("watchdog_gpu_lost", lost),
              ("watchdog_gpu_fault", fault), ("watchdog_gpu_stall", stall),
              ("watchdog_gpu_utilization_ratio", util), ("watchdog_gpu_power_busy_ratio", busy),
              ("watchdog_gpu_power_watts", watts), ("watchdog_gpu_sm_activity_ratio", sm))
    return [{"series": f"{name}{{{lab}}}", "values": v} for name, v in values if v is not None]


def node(name: str, job: str, *, up: str = "1x40", thermal: str | None = None) -> Series:
    lab = f'node="{name}",instance="{name}:9849",job="nvml-watchdog"'
    zero = "0x40" if up == "1x40" else up.replace("1x", "0x")
    return [
        {"series": f'watchdog_build_info{{{lab},version="0.1.0",python="3.11.7"}}',
         "values": up},
        {"series": f'watchdog_job_info{{{lab},job_id="{job}",scheduler="slurm",run="",'
                   'namespace="",pod=""}', "values": up},
        {"series": f'watchdog_incidents{{{lab},kind="comm_hang"}}', "values": zero},
        {"series": f'watchdog_incidents{{{lab},kind="thermal_throttle"}}',
         "values": thermal or zero}]


def hung(names: tuple[str, ...], job: str = "4242") -> Series:
    out: Series = []
    for n in names:
        out += node(n, job)
        for g in (0, 1):
            out += gpu(n, g, job, hang=HUNG, busy=SPIN, watts="105x40")
    return out


def training(names: tuple[str, ...], job: str, **kw: str) -> Series:
    out: Series = []
    for n in names:
        out += node(n, job)
        for g in (0, 1):
            out += gpu(n, g, job, **kw)
    return out


def culprit(name: str, what: str, hung_nodes: int = 3, nodes: int = 4) -> dict[str, Any]:
    return {"exp_labels": {"severity": "critical", "job_id": "4242", "node": name},
            "exp_annotations": {
                "summary": f"Job 4242 hangs and {name} is the odd node out: {what}the job's "
                           "other nodes wait for it in a collective.",
                "description": f"{hung_nodes} of the job's {nodes} nodes are hung (comm_hang)."
                               f" Look at {name} first: its rank's log, dmesg (XID), `watchdog "
                               "status` there; then restart the job without it.",
                "runbook": "docs/fleet.md#jobhangculprit"}}


def job_hang(hung_nodes: int, nodes: int) -> list[dict[str, Any]]:
    return [{"exp_labels": {"severity": "critical", "job_id": "4242"},
             "exp_annotations": {
                 "summary": f"Job 4242 hangs on {hung_nodes} of its {nodes} nodes and no "
                            "single node stands out: py-spy dump the ranks, check the network.",
                 "runbook": "docs/fleet.md#jobhang"}}]


def none(at: tuple[str, ...], alerts: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"eval_time": t, "alertname": a, "exp_alerts": []} for t in at for a in alerts]


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def case(name: str, series: Series, alerts: list[dict[str, Any]],
             exprs: list[dict[str, Any]] | None = None) -> None:
        t: dict[str, Any] = {"name": name, "interval": "10s", "input_series": series,
                             "alert_rule_test": alerts}
        if exprs:
            t["promql_expr_test"] = exprs
        out.append(t)

    crashed = training(("n4",), "4242", **CRASHED)
    case("a rank crash: the node whose GPUs went idle is named, 30 s after the hang",
         hung(("n1", "n2", "n3")) + crashed + training(("m1", "m2", "m3"), "77"),
         [{"eval_time": "50s", "alertname": "JobHangCulprit", "exp_alerts": []},
          {"eval_time": "70s", "alertname": "JobHangCulprit",
           "exp_alerts": [culprit("n4", "GPU 0 idle; GPU 1 idle; ")]},
          *none(("5m",), ("JobHang", "JobStragglerNode"))],
         [{"expr": "watchdog:job:hung_ratio", "eval_time": "70s",
           "exp_samples": [{"labels": 'watchdog:job:hung_ratio{job_id="4242"}', "value": 0.75}]}])

    lost = node("n4", "4242") + gpu("n4", 0, "4242", hang=HUNG, busy=SPIN, watts="105x40") + \
        gpu("n4", 1, "4242", lost="0x2 1x37", fault="0x2 1x37", util="1x2 stale",
            busy="0.9x2 stale", watts="600x2 stale")
    case("a GPU off the bus: its node is named with the GPU, though its other GPU hangs",
         hung(("n1", "n2", "n3")) + lost,
         [{"eval_time": "70s", "alertname": "JobHangCulprit",
           "exp_alerts": [culprit("n4", "GPU 1 lost; ", hung_nodes=4)]}])

    stale = {k: "0x2 stale" for k in ("hang", "lost", "fault", "stall")}
    silent = node("n4", "4242", up="1x2 stale") + [
        s for g in (0, 1) for s in gpu("n4", g, "4242", util="1x2 stale", busy="0.9x2 stale",
                                       watts="600x2 stale", **stale)]
    case("an agent that went silent while its job hangs is the odd node",
         hung(("n1", "n2", "n3")) + silent,
         [{"eval_time": "70s", "alertname": "JobHangCulprit",
           "exp_alerts": [culprit("n4", "its agent stopped reporting; ")]}])

    waiting = training(("n4",), "4242", hang="0x12 1x27", busy="0.9x3 0.03x36",
                       watts="600x3 105x36")
    case("a node still waiting out its own learned wait is not a culprit (the job hang is)",
         hung(("n1", "n2", "n3")) + waiting,
         [*none(("40s", "70s", "100s", "130s", "5m"), ("JobHangCulprit",)),
          *none(("50s",), ("JobHang",)),
          {"eval_time": "70s", "alertname": "JobHang", "exp_alerts": job_hang(3, 4)},
          {"eval_time": "5m", "alertname": "JobHang", "exp_alerts": job_hang(4, 4)}])

    case("one hung node of four is a node-local hang: no fleet alert",
         hung(("n1",)) + training(("n2", "n3", "n4"), "4242"),
         none(("70s", "5m"), ("JobHangCulprit", "JobHang", "JobStragglerNode")))

    solo = node("solo", "5") + gpu("solo", 0, "5", hang=HUNG, busy=SPIN, watts="105x40") + \
        gpu("solo", 1, "5", **CRASHED)
    case("a single-node job has no fleet culprit", solo,
         none(("5m",), ("JobHangCulprit", "JobHang")))

    case("up to a quarter of the nodes may be named: two of eight",
         hung(tuple(f"n{i}" for i in range(1, 7))) + training(("n7", "n8"), "4242", **CRASHED),
         [{"eval_time": "70s", "alertname": "JobHangCulprit",
           "exp_alerts": [culprit(n, "GPU 0 idle; GPU 1 idle; ", 6, 8) for n in ("n7", "n8")]},
          *none(("5m",), ("JobHang",))])

    case("half the nodes odd is no culprit but a job hang",
         hung(("n1", "n2")) + training(("n3", "n4"), "4242", **CRASHED),
         [*none(("5m",), ("JobHangCulprit",)),
          {"eval_time": "5m", "alertname": "JobHang", "exp_alerts": job_hang(2, 4)}])

    case("two jobs never name each other's nodes",
         hung(("n1", "n2", "n3")) + crashed + training(("m1", "m2", "m3"), "77")
         + training(("m4",), "77", util="0x40", busy="0x40", watts="70x40"),
         [{"eval_time": "70s", "alertname": "JobHangCulprit",
           "exp_alerts": [culprit("n4", "GPU 0 idle; GPU 1 idle; ")]}],
         [{"expr": "watchdog:job_node:odd", "eval_time": "70s",
           "exp_samples": [{"labels": 'watchdog:job_node:odd{job_id="4242",node="n4"}',
                            "value": 1}]}])

    slow = {"watts": "600x5 470x34", "sm": "0.9x5 0.68x34"}
    busy = training(("n1", "n2", "n4"), "4242", sm="0.9x40")
    case("a straggler node is named within 5 minutes",
         busy + training(("n3",), "4242", **slow),
         [*none(("3m",), ("JobStragglerNode",)),
          {"eval_time": "5m", "alertname": "JobStragglerNode", "exp_alerts": [
              {"exp_labels": {"severity": "warning", "job_id": "4242", "node": "n3"},
               "exp_annotations": {
                   "summary": "n3 is a straggler in job 4242: its GPUs run 78.33% of the job's "
                              "median node power, with no rule on the node explaining it: the "
                              "whole job runs at its pace. Check clocks, power limits and "
                              "cooling there.",
                   "runbook": "docs/fleet.md#jobstragglernode"}}]},
          *none(("5m",), ("JobHangCulprit",))])

    explained = node("n3", "4242", thermal="0x5 1x34") + [
        s for g in (0, 1) for s in gpu("n3", g, "4242", **slow)]
    case("a straggler its own node's rule explains (thermal) is that rule's page",
         busy + explained, none(("5m",), ("JobStragglerNode",)))

    stalled = training(("n1", "n2", "n3"), "4242", stall="0x3 1x36", util="1x3 0x36",
                       busy="0.9x3 0.05x36", watts="600x3 80x36")
    case("a job stalled on most of its nodes is one alert",
         stalled + training(("n4",), "4242", util="1x3 0x36", busy="0.9x3 0.05x36",
                            watts="600x3 80x36"),
         [{"eval_time": "70s", "alertname": "JobStall", "exp_alerts": [
             {"exp_labels": {"severity": "warning", "job_id": "4242"},
              "exp_annotations": {
                  "summary": "Job 4242 stalled on 3 of its nodes: processes hold GPU memory and "
                             "the GPUs do nothing (dataloader, storage, host-side hang).",
                  "runbook": "docs/fleet.md#jobstall"}}]},
          *none(("5m",), ("JobStragglerNode",))])

    # --- the agents' own health ----------------------------------------------------------
    agents = (*agent("a1", up="1x10 0x80", info="1x10 stale"),  # scrape fails from 110 s
              *agent("a2", up="1x10 stale", info="1x10 stale"),  # target gone from 110 s
              *agent("a3"))  # healthy
    case("an agent that cannot be scraped, or whose target is gone, is down after 5 min",
         agents,
         [*none(("6m",), ("WatchdogAgentDown",)),
          {"eval_time": "7m", "alertname": "WatchdogAgentDown", "exp_alerts": [
              agent_down("a1"), agent_down("a2")]}])

    sinks = (*agent("a1", extra=[sink_up("a1", "slack", "1x5 0x80"),
                                 sink_up("a1", "hook", "1x85")]),
             *agent("a2", extra=[sink_up("a2", "slack", "1x5 0x3 1x77")]))  # a blip
    case("a sink that keeps refusing or failing is named after 10 minutes, a blip is not",
         sinks,
         [*none(("10m",), ("WatchdogSinkFailing",)),
          {"eval_time": "11m", "alertname": "WatchdogSinkFailing", "exp_alerts": [
              {"exp_labels": {"severity": "warning", "node": "a1", "sink": "slack",
                              "type": "slack"},
               "exp_annotations": {
                   "summary": "a1's alerting sink slack (slack) has failed or refused every "
                              "notification for 10 minutes: its pages are not delivered. "
                              "`watchdog status` and `watchdog alerts test --config …` on the "
                              "node say why (a token, a URL, a channel).",
                   "runbook": "docs/fleet.md#watchdogsinkfailing"}}]}])

    unwatched = (*agent("a1", source="1x5 0x80"),  # NVML gone from 50 s
                 *agent("a2", ticks="0+10x20 200x80"),  # sampling stopped at 200 s
                 *agent("a3"))
    case("a node whose GPUs cannot be read, or whose sampling stopped, is unwatched",
         unwatched,
         [*none(("5m",), ("WatchdogNodeUnwatched",)),
          {"eval_time": "6m", "alertname": "WatchdogNodeUnwatched",
           "exp_alerts": [unwatched_alert("a1", "its agent cannot read the GPUs (NVML, the "
                                                "driver: `nvidia-smi` there)")]},
          {"eval_time": "14m", "alertname": "WatchdogNodeUnwatched",
           "exp_alerts": [unwatched_alert("a1", "its agent cannot read the GPUs (NVML, the "
                                                "driver: `nvidia-smi` there)"),
                          unwatched_alert("a2", "its agent has sampled nothing for 5 "
                                                "minutes (`watchdog status` there)")]}])
    return out


def agent(name: str, *, up: str = "1x90", info: str = "1x90", source: str = "1x90",
          ticks: str = "0+10x90", extra: Series | None = None) -> Series:
    """The agent-health series of one node (15 min at 10 s): the target's ``up`` and the
    agent's own."""
    target = f'instance="{name}:9849",job="nvml-watchdog"'
    lab = f'node="{name}",{target}'
    return [{"series": f"up{{{target}}}", "values": up},
            {"series": f'watchdog_build_info{{{lab},version="0.1.0",python="3.11.7"}}',
             "values": info},
            {"series": f"watchdog_source_up{{{lab}}}", "values": source},
            {"series": f"watchdog_ticks_total{{{lab}}}", "values": ticks},
            *(extra or [])]


def sink_up(node_name: str, sink: str, values: str) -> dict[str, str]:
    lab = f'node="{node_name}",instance="{node_name}:9849",job="nvml-watchdog"'
    kind = "slack" if sink == "slack" else "webhook"
    return {"series": f'watchdog_notify_sink_up{{{lab},sink="{sink}",type="{kind}"}}',
            "values": values}


def agent_down(name: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": "warning", "node": name, "instance": f"{name}:9849"},
            "exp_annotations": {
                "summary": f"The nvml-watchdog agent on {name} ({name}:9849) has not been "
                           "scraped for 5 minutes: no GPU fault there is detected or paged. "
                           "Check `systemctl status nvml-watchdog` and `journalctl -u "
                           "nvml-watchdog` on it.",
                "runbook": "docs/fleet.md#watchdogagentdown"}}


def unwatched_alert(name: str, why: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": "warning", "node": name, "instance": f"{name}:9849"},
            "exp_annotations": {"summary": f"{name} is not watched: {why}.",
                                "runbook": "docs/fleet.md#watchdognodeunwatched"}}


def render() -> str:
    doc = {"rule_files": ["../../rules/prometheus/fleet.yml"], "evaluation_interval": "10s",
           "tests": cases()}
    head = "# Written by make_fleet_test.py (run it after changing the cases; do not edit)\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=200)


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
