"""Alert delivery under trouble: lost, duplicated and early pages per scenario.

The real Notifier (policy, SQLite outbox, delivery workers) sends through the real webhook
sink to a loopback receiver that misbehaves as scripted. Incidents are the detector's own
objects on a manual clock; the receiver counts what arrives. Budget (issue 9): 0 lost,
0 duplicated, 0 sent before a Retry-After allowed, and at most 2 notifications for an
incident flapping every minute for an hour.

    python bench/alerting_bench.py          # prints one row per scenario and PASS/FAIL
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.incident import Incident
from watchdog.notify.config import NotifyConfig, SinkSpec
from watchdog.notify.notifier import Notifier, build_sinks
from watchdog.state import connect
from watchdog.testing.httpserver import Reply, Request, Server

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def inc(kind: str, gpus: list[str], t: float, rule: str | None = None) -> Incident:
    return Incident(kind=kind, severity="critical" if kind == "comm_hang" else "warning",
                    host="node7", gpus=gpus, uuids=[f"GPU-{g}" for g in gpus],
                    started_at=t - 30, fired_at=t, resolved_at=None, rule=rule or kind,
                    summary=f"{kind} on GPU {','.join(gpus)}", evidence={})


def info(rule: str) -> tuple[str, str | None]:
    return ("node" if rule == "hang" else "gpu"), None


def notifier(state: Path, url: str, clock: Clock) -> Notifier:
    cfg = NotifyConfig(sinks=(SinkSpec("hook", "webhook", {"url": url}, "bench"),),
                       group_wait=10, group_interval=30, resolve_hold=60)
    return Notifier(cfg, lambda: connect(state), clock, "node7", info, build_sinks(cfg))


def step(n: Notifier, clock: Clock, seconds: float, dt: float = 1.0) -> None:
    end = clock.t + seconds
    while clock.t < end:
        clock.t += dt
        n.tick(clock.t)


Scenario = Callable[[Path, Server], tuple[int, int]]  # -> (expected pages, allowed extra)


def hang_grows_and_resolves(state: Path, srv: Server) -> tuple[int, int]:
    c = Clock()
    n = notifier(state, srv.url, c)
    i = inc("comm_hang", ["0", "1", "2", "3"], c.t, "hang")
    n.observe([("firing", i)])
    step(n, c, 40)
    i.gpus += ["4", "5", "6", "7"]
    i.uuids += ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    n.observe([("updated", i)])
    step(n, c, 60)
    i.resolved_at = c.t
    n.observe([("resolved", i)])
    step(n, c, 200)
    n.drain(20)
    n.close()
    return 3, 0  # new, update (GPUs joined), resolved


def node_wide_throttle(state: Path, srv: Server) -> tuple[int, int]:
    c = Clock()
    n = notifier(state, srv.url, c)
    incs = [inc("thermal_throttle", [str(g)], c.t) for g in range(8)]
    n.observe([("firing", x) for x in incs])
    step(n, c, 300)
    for x in incs:
        x.resolved_at = c.t
    n.observe([("resolved", x) for x in incs])
    step(n, c, 200)
    n.drain(20)
    n.close()
    return 2, 0  # one notification listing 8 GPUs, one resolve


def flapping_hour(state: Path, srv: Server) -> tuple[int, int]:
    c = Clock()
    n = notifier(state, srv.url, c)
    for _ in range(60):
        x = inc("thermal_throttle", ["3"], c.t)
        n.observe([("firing", x)])
        step(n, c, 30, 5)
        x.resolved_at = c.t
        n.observe([("resolved", x)])
        step(n, c, 30, 5)
    step(n, c, 7200, 30)
    n.drain(20)
    n.close()
    return 2, 0


def storm_429(state: Path, srv: Server) -> tuple[int, int]:
    """The receiver answers 429 (Retry-After: 1) to every other request for a while."""
    state_n = {"k": 0}

    def handler(req: Request) -> Reply:
        state_n["k"] += 1
        return Reply(429, {}, {"Retry-After": "1"}) if state_n["k"] % 2 else Reply(200)

    srv.handler = handler
    c = Clock()
    n = notifier(state, srv.url, c)
    for g in range(6):  # six hosts' worth of groups: six separate pages
        x = inc("ecc", [str(g)], c.t)
        x.host = f"node{g}"
        n.observe([("firing", x)])
    step(n, c, 20)
    n.drain(30)
    n.close()
    return 6, 0


def outage_then_restart(state: Path, srv: Server) -> tuple[int, int]:
    """The receiver is down (503) while pages queue; the agent stops without draining
    (as after a kill -9) and a new one on the same state delivers them once."""
    srv.default = Reply(503)
    c = Clock()
    n = notifier(state, srv.url, c)
    x = inc("gpu_lost", ["2"], c.t)
    n.observe([("firing", x)])
    step(n, c, 30)
    time.sleep(1.5)
    for w in n.workers.values():
        w.stop()
    n.policy.conn.close()  # no drain, no goodbye
    srv.default = Reply(200)
    c2 = Clock()
    c2.t = c.t + 5
    n2 = notifier(state, srv.url, c2)
    n2.observe([("firing", x)])  # the detector raises it again after the restart
    step(n2, c2, 30)
    x.resolved_at = c2.t
    n2.observe([("resolved", x)])
    step(n2, c2, 200)
    n2.drain(30)
    n2.close()
    return 2, 0


SCENARIOS: dict[str, Scenario] = {
    "hung job, GPUs join, resolves": hang_grows_and_resolves,
    "node-wide throttle, 8 GPUs": node_wide_throttle,
    "flapping every minute, 1 h": flapping_hour,
    "429 storm (Retry-After 1 s)": storm_429,
    "sink down, restart mid-delivery": outage_then_restart,
}


def main() -> int:
    ok = True
    print(f"{'scenario':34} {'expected':>8} {'sent':>5} {'lost':>5} {'dup':>4} {'early':>6}")
    for name, fn in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as d, Server() as srv:
            expected, _ = fn(Path(d), srv)
            got = srv.requests
        keys = [(r.body["id"]) for r in got]
        pages = [(r.body["group_key"], r.body["reason"], tuple(r.body["changed"])) for r in got]
        dup = len(keys) - len(set(keys)) + len(pages) - len(set(pages))
        lost = max(0, expected - len(set(keys)))
        early = 0
        last_refused: dict[str, float] = {}
        for r in sorted([*srv.refused, *got], key=lambda r: r.at):
            k = r.body.get("id")
            if r in srv.refused:
                last_refused[k] = r.at
            elif k in last_refused and r.at - last_refused[k] < 0.95:
                early += 1
        extra = max(0, len(set(keys)) - expected)
        good = lost == 0 and dup == 0 and early == 0 and extra == 0
        ok &= good
        print(f"{name:34} {expected:>8} {len(got):>5} {lost:>5} {dup:>4} {early:>6}  "
              f"{'ok' if good else 'FAIL'}")
    print(f"budget (0 lost, 0 duplicated, 0 early, flapping <= 2): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
