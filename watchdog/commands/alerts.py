"""``watchdog alerts``: what the agent is alerting about and where each page went;
``watchdog alerts test``: send a clearly marked test message through every sink now.

Both read the daemon's config (``--config``, the file the unit uses) to find the state
directory and the sinks; without it ``alerts`` looks where the service keeps its state
(:mod:`watchdog.store.locate`), and a config broken by a typo still leads to the state
(one warning line says so). ``alerts`` opens the state database read-only, so it is safe
as root next to a running service.

``alerts --json`` prints one JSON object::

    {"alerts": [{"fingerprint": str, "state": "firing" | "resolving" | "resolved",
                 "hold_until": ISO 8601|null, "hold_until_epoch": POSIX seconds|null,
                 "headline": "CRITICAL comm_hang on node7, GPUs 0-7, for 12 min",
                 "alert": {kind, severity, host, gpus, uuids, started_at, fired_at,
                           resolved_at (each also as <name>_epoch), rule, summary,
                           evidence, labels, runbook_url, job_id},
                 "notifications": [{"sink", "reason", "state", "attempts", "last_error",
                                    "sent_at", "sent_at_epoch"}]}],
     "silences": [as `watchdog silence list --json`],
     "outbox": {SINK: {"sent"|"pending"|"failed": {"count", "last_at", "last_at_epoch"},
                       "last_error": str|null, "dropped": int (when some were)}},
     "state_dir": str, "config_error": str|null}

Times as everywhere in these commands: ``NAME`` ISO 8601 with zone, ``NAME_epoch`` POSIX
seconds. ``state`` ``resolving`` with ``alert.resolved_at`` set (listed as CLEARED): the
detector resolved it and the resolve notification is held (``resolve_hold``, longer when
flapping) until ``hold_until``; without ``resolved_at`` (listed as FIRING): it was firing
when the agent stopped and waits until ``hold_until`` for the restarted detector to confirm
it. "How long" is the condition's age (``watchdog.notify.render``), on the agent's clock (a
simulated node's own time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    import sqlite3

    from watchdog.notify.base import Alert


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alerts", help="list alerts and deliveries; `alerts test` tries the sinks",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("action", nargs="?", choices=["test"],
                   help="test: send a clearly marked test message through every sink now")
    p.add_argument("--config", metavar="FILE", help="the daemon's config (state_dir, sinks)")
    p.add_argument("--state-dir", metavar="DIR", help="state directory (overrides the config)")
    p.add_argument("--all", action="store_true", help="also alerts resolved in the last hour")
    p.add_argument("--sink", metavar="NAME", help="with test: only this sink")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from watchdog.errors import InputError

    if args.action == "test":
        if not args.config:
            raise InputError("alerts test: needs --config FILE (the sinks to try)")
        return run_test(args)
    if args.sink:
        raise InputError("--sink goes with `alerts test`")
    return run_alerts(args)


def agent_now(conn: sqlite3.Connection, wall: float) -> float:
    """The agent's clock now, for "how long": the wall clock, except for a simulated node
    whose clock runs ahead of it (``--speed``), where it is the simulated time of the
    agent's last status (or of its stop)."""
    from watchdog.store.agent import read_status

    doc, _ = read_status(conn)
    from watchdog.sources import is_sim

    if doc and is_sim(str(doc.get("source") or "")):
        t = doc.get("stopped_at") or doc.get("now")
        if isinstance(t, int | float) and t > wall:
            return float(t)
    return wall


def listing_line(state: str, a: Alert, now: float, hold: float | None) -> str:
    """One alert of ``watchdog alerts``: the state once, then what, where and how long.

    ``FIRING    CRITICAL comm_hang on node7, GPUs 0-7, for 12 min``
    ``CLEARED   CRITICAL comm_hang on node7, GPUs 0-7, after 40 min; the resolve goes out …``
    ``RESOLVED  comm_hang on node7, GPUs 0-7, after 40 min (was critical)``
    """
    from dataclasses import replace

    from watchdog.notify import render

    def at(t: float) -> str:
        return time.strftime("%H:%M:%S UTC", time.gmtime(t))

    if state == "resolved":
        return f"{'RESOLVED':9} {render.describe(a, now)} (was {a.severity})"
    sev = a.severity.upper()
    if state == "resolving" and a.resolved_at is not None:
        text = render.describe(replace(a, status="resolved"), now)
        held = f"; the resolve goes out at {at(hold)} unless it fires again" if hold else ""
        return f"{'CLEARED':9} {sev} {text}{held}"
    text = render.describe(replace(a, status="firing", resolved_at=None), now)
    if state == "resolving" and hold:  # firing when the agent stopped
        text += f" (firing before a restart: to be confirmed by {at(hold)})"
    return f"{'FIRING':9} {sev} {text}"


def run_alerts(args: argparse.Namespace) -> int:
    from watchdog.commands.common import service_state, silence_json, with_times
    from watchdog.notify import render
    from watchdog.notify import store as st
    from watchdog.store import connect
    from watchdog.store.agent import agent_wall

    found, broken = service_state(args)
    conn = connect(found.path, readonly=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        if "notify_alerts" not in tables:
            print("no alerting state: the config names no notify sinks, or the agent has not "
                  "run with them yet", file=sys.stderr)
            return 0
        # one pass over the outbox: which notifications carried which fingerprint
        sends_of: dict[str, list[JsonDoc]] = {}
        keys = ("sink", "reason", "state", "attempts", "last_error", "sent_at")
        for *row, doc in conn.execute("SELECT sink, reason, state, attempts, last_error, "
                                      "sent_at, doc FROM notify_outbox ORDER BY id"):
            sent = with_times(dict(zip(keys, row, strict=True)), ("sent_at",))
            for a in st.notification_from_json(doc).alerts:
                sends_of.setdefault(a.fingerprint, []).append(sent)
        wall = agent_wall(conn, time.time())
        now = agent_now(conn, wall)
        alerts, lines = [], []
        for fp, doc, state, hold in conn.execute(
                "SELECT fp, doc, state, hold_until FROM notify_alerts ORDER BY updated_at"):
            if state == "resolved" and not args.all:
                continue
            a = st.alert_from_json(doc)
            alerts.append({**with_times({"hold_until": hold}, ("hold_until",)),
                           "fingerprint": fp, "state": state,
                           "alert": render.jsonable_alert(a),
                           "notifications": sends_of.get(fp, []),
                           "headline": render.headline(a, now)})
            lines.append(listing_line(state, a, now, hold))
        silences = [silence_json(s, wall) for s in st.silences(conn, wall)]
        sinks: JsonDoc = {}
        for sink, state, n, last in conn.execute(
                "SELECT sink, state, COUNT(*), MAX(COALESCE(sent_at, created_at)) FROM "
                "notify_outbox GROUP BY sink, state"):
            sinks.setdefault(sink, {})[state] = with_times({"count": n, "last_at": last},
                                                           ("last_at",))
        for sink, err in conn.execute("SELECT sink, last_error FROM notify_sinks"):
            sinks.setdefault(sink, {})["last_error"] = err
        from watchdog.notify.outbox import dropped

        for sink, n in dropped(conn).items():
            sinks.setdefault(sink, {})["dropped"] = n
    finally:
        conn.close()
    if args.json:
        print(json.dumps({"alerts": alerts, "silences": silences, "outbox": sinks,
                          "state_dir": str(found.path), "config_error": broken}))
        return 0
    from watchdog.escape import line as one_line

    if not alerts:
        print("no alerts")
    for doc, line in zip(alerts, lines, strict=True):
        print(one_line(f"{line}  [{doc['fingerprint']}]"))
        for n in doc["notifications"]:
            err = f" ({n['last_error']})" if n["last_error"] else ""
            print(one_line(f"    {n['sink']:12} {n['reason']:8} {n['state']}{err}"))
    for name, d in sorted(sinks.items()):
        sent = d.get("sent", {})
        last = (time.strftime("%H:%M:%S UTC", time.gmtime(sent["last_at_epoch"]))
                if sent.get("last_at_epoch") else "never")
        line = (f"sink {name}: {sent.get('count', 0)} delivered (last {last}), "
                f"{d.get('pending', {}).get('count', 0)} pending, "
                f"{d.get('failed', {}).get('count', 0)} undeliverable")
        if d.get("dropped"):
            line += (f", {d['dropped']} superseded dropped by a full outbox (each group's "
                     "newest state kept)")
        print(one_line(line + (f"; last error: {d['last_error']}" if d.get("last_error")
                               else "")))
    for s in silences:
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(s["ends_at_epoch"]))
        print(one_line(f"silence {s['id']}: {s['what']} muted until {until}: {s['comment']}"))
    return 0


def run_test(args: argparse.Namespace) -> int:
    import socket
    import uuid

    from watchdog import config as config_mod
    from watchdog.errors import InputError
    from watchdog.escape import line as one_line
    from watchdog.notify.base import Accepted, Notification, Retry
    from watchdog.notify.notifier import build_sinks

    cfg = config_mod.load(args.config)
    if cfg.notify is None or not cfg.notify.sinks:
        raise InputError(f"{args.config}: no notify sinks configured")
    sinks = build_sinks(cfg.notify)
    if args.sink:
        if args.sink not in sinks:
            raise InputError(f"--sink {args.sink}: not in {args.config} (sinks: "
                             f"{', '.join(sinks)})")
        sinks = {args.sink: sinks[args.sink]}
    host = cfg.host or socket.gethostname()
    bad = 0
    for name, sink in sinks.items():
        n = Notification(id=uuid.uuid4().hex, sink=name, group_key=f"agent/{host}",
                         reason="test", created_at=time.time(), alerts=(),
                         text=f"test from {host}: this sink works. No action needed.")
        result = sink.send(n, {})
        if isinstance(result, Retry) and result.memory.get("done"):
            # half done (PagerDuty's test trigger went out, its resolve did not): one more
            # try finishes it rather than leave a test incident open
            time.sleep(min(result.after if result.after is not None else 1.0, 5.0))
            result = sink.send(n, result.memory)
        ok = isinstance(result, Accepted)
        bad += not ok
        said = (result.answer if isinstance(result, Accepted) else result.error) or ""
        print(one_line(f"{name} ({sink.type}): "
                       f"{'delivered' if ok else type(result).__name__.lower()}"
                       + (f": {said}" if said else "")))
        sink.close()
    return 1 if bad else 0
