"""``watchdog silence add|list|expire``: mute notifications for a GPU, a kind or the whole
node for a while (maintenance, a known fault being fixed). Silences live in the agent's
state database, so a running agent honours them within seconds and they survive
restarts; they end by themselves. The commands act on the service's state (``--config``,
``--state-dir``, else where the service keeps it: :mod:`watchdog.store.locate`) and never
create a state directory: where no agent state is found they refuse, naming where they
looked, rather than mute nothing. Incidents are still detected and listed by
``watchdog alerts``; only the notifications are held back.

``silence list --json`` prints one JSON object::

    {"silences": [{"id": int, "what": "GPU 3 thermal_throttle" | "everything",
                   "host": str|null, "gpu": str|null, "kind": str|null,
                   "state": "active" | "ended" | "expired",
                   "starts_at": ISO 8601, "starts_at_epoch": POSIX seconds,
                   "ends_at": ISO 8601, "ends_at_epoch": POSIX seconds,
                   "expired_at": ISO 8601|null, "expired_at_epoch": POSIX seconds|null,
                   "comment": str, "created_by": str}]}

Every time in the JSON of ``silence list`` and ``alerts`` is given twice: ``NAME`` as ISO
8601 with its zone (``2026-11-21T10:00:00.000+00:00``) and ``NAME_epoch`` as POSIX seconds,
null when there is none (:func:`with_times`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.store.locate import Found


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("silence", help="mute notifications for a while",
                       description=__doc__.split("\n\n")[0])
    ssub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = ssub.add_parser("add", help="add a silence")
    add.add_argument("--gpu", metavar="N|UUID", help="only this GPU (index or UUID)")
    add.add_argument("--kind", metavar="KIND", help="only this incident kind")
    add.add_argument("--all", action="store_true", help="everything on this node")
    add.add_argument("--for", dest="duration", metavar="DURATION", required=True,
                     help="how long, e.g. 2h, 30m")
    add.add_argument("--comment", required=True, help="why (shown in `silence list`)")
    add.add_argument("--host", help="only incidents of this host (default: any)")
    lst = ssub.add_parser("list", help="list active silences (--all: also ended ones)")
    lst.add_argument("--all", action="store_true", help="also silences that ended")
    lst.add_argument("--json", action="store_true",
                     help='one JSON object on stdout: {"silences": [...]}')
    exp = ssub.add_parser("expire", help="end a silence now")
    exp.add_argument("id", type=int)
    for q in (add, lst, exp):
        q.add_argument("--config", metavar="FILE", help="the daemon's config (for state_dir)")
        q.add_argument("--state-dir", metavar="DIR", help="state directory")
    p.set_defaults(func=run)


def _check_add(args: argparse.Namespace) -> float:
    """The arguments of ``silence add`` checked before any state is touched; returns the
    duration in seconds."""
    from watchdog.errors import InputError
    from watchdog.incident import KINDS
    from watchdog.units import parse_duration

    if not (args.all or args.gpu or args.kind):
        raise InputError("silence add: say what to mute: --gpu N, --kind KIND, or "
                         "--all for the whole node")
    if args.all and (args.gpu or args.kind):
        raise InputError("silence add: --all mutes everything; leave out --gpu/--kind")
    if args.kind and args.kind not in KINDS:
        raise InputError(f"--kind {args.kind}: not an incident kind (one of: "
                         f"{', '.join(KINDS)})")
    secs = parse_duration(args.duration, what="--for")
    if secs <= 0:
        raise InputError("--for: must be positive")
    return secs


def where(found: Found) -> str:
    """``agent pid 1234 on /var/lib/nvml-watchdog``, or that none runs there now."""
    if found.pid is not None:
        return f"agent pid {found.pid} on {found.path}"
    return f"state {found.path}; no agent runs on it now: it applies once one starts"


def run(args: argparse.Namespace) -> int:
    from watchdog.commands.common import service_state, silence_json, silence_state, what
    from watchdog.notify import store as st
    from watchdog.store import connect
    from watchdog.store.agent import agent_wall

    secs = _check_add(args) if args.action == "add" else 0.0
    found, _broken = service_state(args)  # the service's state, or one line: where it looked
    if args.action == "list":  # reading only: a member of the service's group may
        conn = connect(found.path, readonly=True)
    else:
        conn = st.open_store(connect(found.path, create=False))
    try:
        now = agent_wall(conn, time.time())  # the running agent's timeline
        if args.action == "add":
            who = os.environ.get("SUDO_USER") or getpass.getuser()
            sid = st.add_silence(conn, host=args.host, gpu=args.gpu, kind=args.kind,
                                 starts_at=now, ends_at=now + secs, comment=args.comment,
                                 created_by=who)
            muted = what({"gpu": args.gpu, "kind": args.kind})
            print(f"silence {sid}: {muted} muted until "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(now + secs))} "
                  f"({where(found)})")
            return 0
        if args.action == "expire":
            if not st.expire_silence(conn, args.id, now):
                print(f"watchdog: silence {args.id}: no such active silence", file=sys.stderr)
                return 1
            print(f"silence {args.id} expired")
            return 0
        import sqlite3

        try:
            rows = st.silences(conn, now, all_=args.all)
        except sqlite3.OperationalError:  # the agent never ran with alerting: no table
            rows = []
        if args.json:
            print(json.dumps({"silences": [silence_json(s, now) for s in rows]}))
            return 0
        if not rows:
            print("no silences" if args.all else "no active silences")
        for s in rows:
            end = s["expired_at"] or s["ends_at"]
            word = {"active": "until", "ended": "ended",
                    "expired": "expired"}[silence_state(s, now)]
            print(f"{s['id']:>4}  {what(s):28} {word} "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(end))}  by "
                  f"{s['created_by']}: {s['comment']}")
        return 0
    finally:
        conn.close()
