"""``watchdog silence add|list|expire``: mute notifications for a GPU, a kind or the whole
node for a while (maintenance, a known fault being fixed). Silences live in the agent's
state database, so a running agent honours them within seconds and they survive
restarts; they end by themselves. Incidents are still detected and listed by
``watchdog alerts``; only the notifications are held back.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time


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
    lst.add_argument("--all", action="store_true")
    exp = ssub.add_parser("expire", help="end a silence now")
    exp.add_argument("id", type=int)
    for q in (add, lst, exp):
        q.add_argument("--config", metavar="FILE", help="the daemon's config (for state_dir)")
        q.add_argument("--state-dir", metavar="DIR", help="state directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from watchdog.commands.alerts import state_dir
    from watchdog.errors import InputError
    from watchdog.incident import KINDS
    from watchdog.notify import store as st
    from watchdog.state import connect
    from watchdog.units import parse_duration

    now = time.time()
    conn = st.open_store(connect(state_dir(args)))
    try:
        if args.action == "add":
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
            who = os.environ.get("SUDO_USER") or getpass.getuser()
            sid = st.add_silence(conn, host=args.host, gpu=args.gpu, kind=args.kind,
                                 starts_at=now, ends_at=now + secs, comment=args.comment,
                                 created_by=who)
            what = "everything" if args.all else " ".join(
                x for x in (f"GPU {args.gpu}" if args.gpu else "", args.kind or "") if x)
            print(f"silence {sid}: {what} muted until "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(now + secs))}")
            return 0
        if args.action == "expire":
            if not st.expire_silence(conn, args.id, now):
                print(f"watchdog: silence {args.id}: no such active silence", file=sys.stderr)
                return 1
            print(f"silence {args.id} expired")
            return 0
        rows = st.silences(conn, now, all_=args.all)
        if not rows:
            print("no active silences")
        for s in rows:
            what = "everything" if not (s["gpu"] or s["kind"]) else " ".join(
                x for x in (f"GPU {s['gpu']}" if s["gpu"] else "", s["kind"] or "") if x)
            end = s["expired_at"] or s["ends_at"]
            state = "expired" if s["expired_at"] or end <= now else "until"
            print(f"{s['id']:>4}  {what:28} {state} "
                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(end))}  by "
                  f"{s['created_by']}: {s['comment']}")
        return 0
    finally:
        conn.close()
