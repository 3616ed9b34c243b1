"""The fleet on loopback, measured: N simulated nodes of one job, one of them the culprit,
the rest hung; a second, healthy job with one straggler node; a real Prometheus with the
shipped fleet rules (scrape and evaluation every 15 s, as config/prometheus-fleet.yml);
a real Alertmanager with the documented route (config/alertmanager-fleet.yml, its timers
as shipped); every node paging a PagerDuty stand-in (TLS) directly and posting to
Alertmanager.

    python bench/fleet_bench.py                    # 8, 32 and 64 nodes, ~8 min each
    python bench/fleet_bench.py --nodes 8 --culprit gpu_lost

Per size it prints: the time from hang onset to the one Alertmanager page naming the
culprit (and the bound: the rule's for: + one scrape + one evaluation + Alertmanager's
group_wait after the nodes' own detection), the PagerDuty incidents and Alertmanager
notifications sent, the series per node, Prometheus's rule evaluation time, the
straggler's time to alert, the false fleet alerts, and the agents' missed ticks (a sign
that the machine is saturated). The agents run at real speed (``--speed 1``), so every
time is wall time. Exit 0 when every size met the goals (1 incident, 1 notification naming
the culprit, within the bound; straggler within 5 min; 0 false), else 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from watchdog.testing.fleet import (  # noqa: E402
    Fleet,
    Node,
    fleet_rules,
    free_port,
    missing_binaries,
    pagerduty_incidents,
)
from watchdog.testing.httpserver import Reply, Server, self_signed_cert  # noqa: E402

SCRAPE_S = 15.0
RULE_FOR_S = 30.0
GROUP_WAIT_S = 10.0  # the fleet alerts' route in config/alertmanager-fleet.yml
STRAGGLER_GOAL_S = 300.0
LEAD_S = 150.0  # the hang begins this long after the last agent was launched


def _stamp(line: str) -> float:
    return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _first(log: str, *needles: str) -> float | None:
    for line in log.splitlines():
        if all(n in line for n in needles):
            return _stamp(line)
    return None


def run_size(n: int, culprit: str, folder: Path, tls: tuple[str, str],
             straggle_nodes: int, speed: float) -> dict[str, Any]:
    fleet = Fleet(folder)
    key = folder / "pd.key"
    key.write_text("abcdef0123456789abcdef0123456789\n")
    key.chmod(0o600)
    out: dict[str, Any] = {"nodes": n}
    with Server(Reply(202, {"status": "success", "dedup_key": "x"}), tls=tls) as pd, \
            Server() as receiver:
        try:
            hosts = [f"a{k:03d}" for k in range(1, n + 1)] + \
                [f"b{k:03d}" for k in range(1, straggle_nodes + 1)]
            fleet.nodes = [Node(h, "", free_port()) for h in hosts]
            am = fleet.start_alertmanager(f"{receiver.url}/am", scale=1.0)
            fleet.start_prometheus(fleet_rules(), interval_s=SCRAPE_S)
            sinks = (f"    pagerduty: {{type: pagerduty, routing_key_file: {key}, url: "
                     f"\"{pd.url}\", ca_file: {tls[0]}}}\n"
                     f"    am: {{type: alertmanager, url: \"{am}\"}}\n")
            nodes, fleet.nodes = fleet.nodes, []
            # one agent at a time (each waits for the one before to sample), so that 72
            # Python start-ups do not fight over two cores and every node's hang begins
            # at the same wall time: its onset is counted from its own start
            launch_s = 2.0 * len(nodes)
            t0 = time.time()
            onset_wall = t0 + launch_s + LEAD_S
            startup = 1.0
            for i, node in enumerate(nodes):
                left = onset_wall - time.time()  # the node's clock starts `startup` from now
                at = max(30.0, (left - startup) * speed)
                if node.host.startswith("a"):
                    scen = f"comm_hang@{at:.0f}s"
                    if node.host == hosts[n - 1] and culprit == "rank_crash":
                        scen = f"rank_crash@{at:.0f}s"  # every rank on the node exits
                    elif node.host == hosts[n - 1]:  # GPU 3 falls off; its peers hang
                        scen = f"comm_hang(gpus=0-2+4-7)@{at:.0f}s,gpu_lost(gpus=3)@{at:.0f}s"
                    node.spec = f"sim:node(id={i + 1}),{scen}"
                    seed = 7
                else:
                    slow = node.host == hosts[-1]
                    node.spec = (f"sim:node(id={i + 1}),straggler(gpus=all,factor=0.75)@"
                                 f"{at:.0f}s" if slow else f"sim:node(id={i + 1}),healthy")
                    seed = 11
                launched = time.time()
                fleet.start_agent(node, speed=speed, duration="30m", sinks=sinks, seed=seed,
                                  ask_prometheus=True)
                while time.time() - launched < 15.0 and node.proc.poll() is None and \
                        "watching" not in node.log.read_text(errors="replace"):
                    time.sleep(0.05)
                startup = time.time() - launched
            out["launch_s"] = round(time.time() - t0, 1)
            end = onset_wall + STRAGGLER_GOAL_S + 90.0
            eval_s: list[float] = []
            while time.time() < end:
                eval_s.append(_rule_eval_s(fleet.prom_port))
                if any(nd.proc.poll() is not None for nd in fleet.nodes):
                    break
                time.sleep(10.0)
            series = fleet.query('count by (node) (last_over_time({__name__=~"watchdog_.*|'
                                 'process_.*"}[2m]))')
            alerts = fleet.query('max_over_time(ALERTS{alertstate="firing"}[30m])')
            missed = fleet.query("max by (node) (watchdog_missed_ticks_total)")
            ticks = fleet.query("max by (node) (watchdog_ticks_total)")
        finally:
            fleet.close()
        logs = {nd.host: nd.log.read_text() if nd.log else "" for nd in fleet.nodes}
        events = [(r.body["event_action"], r.body["dedup_key"]) for r in pd.requests]
        am_firing = [(r.at, r.body) for r in receiver.requests if r.body.get("status") ==
                     "firing"]
    job_a = [h for h in hosts if h.startswith("a")]
    culprit_host = job_a[-1]
    fires = sorted(t for h in job_a[:-1] if (t := _first(logs[h], "FIRING", "comm_hang")))
    starts = {h: _first(logs[h], "watching") for h in hosts}
    onsets = []  # each node's onset in wall time: its sim start + its onset
    for nd in nodes:
        if nd.host in job_a and starts.get(nd.host):
            at = float(nd.spec.rsplit("@", 1)[1].rstrip("s"))
            onsets.append(starts[nd.host] + at / speed)
    onset = statistics.median(onsets) if onsets else None
    culprit_pages = [(t, b) for t, b in am_firing if b["groupLabels"].get("alertname") ==
                     "JobHangCulprit"]
    named = sorted({a["labels"].get("node") for _, b in culprit_pages for a in b["alerts"]})
    page_at = culprit_pages[0][0] if culprit_pages else None
    majority = fires[len(job_a) // 2 - 1] if len(fires) >= len(job_a) // 2 else None
    straggler_pages = [(t, b) for t, b in am_firing if b["groupLabels"].get("alertname") ==
                       "JobStragglerNode"]
    expected = {("JobHangCulprit", culprit_host), ("JobStragglerNode", hosts[-1])}
    seen = {(a["metric"].get("alertname"), a["metric"].get("node", "")) for a in alerts}
    false_alerts = sorted(f"{a}:{h}" for a, h in seen - expected)
    per_node = [int(float(s["value"][1])) for s in series]
    out.update({
        "onset_spread_s": round(max(onsets) - min(onsets), 1) if onsets else None,
        "node_detect_s": round(statistics.median(fires) - onset, 1) if fires and onset else None,
        "onset_to_page_s": round(page_at - onset, 1) if page_at and onset else None,
        "majority_to_page_s": round(page_at - majority, 1) if page_at and majority else None,
        "bound_after_majority_s": RULE_FOR_S + 2 * SCRAPE_S + GROUP_WAIT_S,
        "pagerduty_incidents": pagerduty_incidents(events),
        "pagerduty_job_incidents": pagerduty_incidents([e for e in events
                                                        if e[1].startswith("job-")]),
        "pagerduty_events": len(events),
        "am_notifications": len(am_firing),
        "am_culprit_notifications": len(culprit_pages),
        "named": named, "culprit": culprit_host,
        "straggler_s": round(straggler_pages[0][0] - onset, 1)
        if straggler_pages and onset else None,
        "false_alerts": false_alerts,
        "series_per_node_max": max(per_node) if per_node else None,
        "series_per_node_median": statistics.median(per_node) if per_node else None,
        "rule_eval_ms_max": round(1000 * max(eval_s), 2) if eval_s else None,
        "rule_eval_ms_median": round(1000 * statistics.median(eval_s), 2) if eval_s else None,
        "missed_ticks_max": max((int(float(m["value"][1])) for m in missed), default=None),
        "ticks_median": statistics.median(int(float(t["value"][1])) for t in ticks)
        if ticks else None,
        "tracebacks": sum("Traceback" in t for t in logs.values()),
    })
    return out


def _rule_eval_s(port: int) -> float:
    """Prometheus's own last evaluation time of the fleet rule group (s)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("prometheus_rule_group_last_duration_seconds") and \
                        "nvml-watchdog-fleet" in line:
                    return float(line.rsplit(" ", 1)[1])
    except OSError:
        pass
    return 0.0


def ok(r: dict[str, Any]) -> bool:
    return (r["pagerduty_job_incidents"] == 1 and r["am_culprit_notifications"] == 1
            and r["named"] == [r["culprit"]] and r["majority_to_page_s"] is not None
            and r["majority_to_page_s"] <= r["bound_after_majority_s"]
            and r["straggler_s"] is not None and r["straggler_s"] <= STRAGGLER_GOAL_S
            and not r["false_alerts"] and r["tracebacks"] == 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="8,32,64", help="sizes of the hung job (default 8,32,64)")
    ap.add_argument("--culprit", choices=("rank_crash", "gpu_lost"), default="rank_crash")
    ap.add_argument("--straggle-nodes", type=int, default=8,
                    help="nodes of the healthy job, one of them a straggler (default 8)")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    why = missing_binaries()
    if why or shutil.which("openssl") is None:
        print(f"fleet bench: {why or 'openssl is not installed'}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        tls = self_signed_cert(tmp)
        for size in (int(x) for x in args.nodes.split(",")):
            folder = Path(tmp) / f"n{size}"
            folder.mkdir()
            r = run_size(size, args.culprit, folder, tls, args.straggle_nodes, args.speed)
            r["pass"] = ok(r)
            results.append(r)
            print(json.dumps(r) if args.json else _line(r), flush=True)
    return 0 if all(r["pass"] for r in results) else 1


def _line(r: dict[str, Any]) -> str:
    return (f"{r['nodes']:3d} nodes: onset->culprit page "
            f"{r['onset_to_page_s']} s (node detection {r['node_detect_s']} s, majority->page "
            f"{r['majority_to_page_s']} s, bound {r['bound_after_majority_s']:.0f} s) · PD "
            f"incidents {r['pagerduty_incidents']} (job {r['pagerduty_job_incidents']}; "
            f"{r['pagerduty_events']} events) · AM "
            f"notifications {r['am_notifications']} (culprit {r['am_culprit_notifications']}, "
            f"named {','.join(r['named'])}) · straggler {r['straggler_s']} s · false "
            f"{len(r['false_alerts'])} {r['false_alerts']} · series/node max "
            f"{r['series_per_node_max']} · rule eval median {r['rule_eval_ms_median']} ms max "
            f"{r['rule_eval_ms_max']} ms · missed ticks max {r['missed_ticks_max']} · onset "
            f"spread {r['onset_spread_s']} s · {'PASS' if r['pass'] else 'FAIL'}")


if __name__ == "__main__":
    sys.exit(main())
