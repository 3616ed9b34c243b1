"""``watchdog status``: what the agent is doing, read from its state directory.

Works on a running or a stopped agent, as the service's user or as root (the state
database is opened read-only; nothing is written). ``--config`` is the file the service
runs with (it names ``state_dir``); without it, where the service keeps its state
(:mod:`watchdog.store.locate`: ``$STATE_DIRECTORY``, the installed config, the unit's
``/var/lib/nvml-watchdog``, this user's). A config broken by a typo (the agent keeps its
running one) still leads to the state; a warning line says it is broken. Exit status: 0
the agent wrote its status recently, 1 it looks stopped or stale or an alerting sink is
down (it refuses every notification, or has failed for ``sink_fail_after``), 2 no state
or bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the running agent's status",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--config", metavar="FILE", help="the daemon's config (for state_dir)")
    p.add_argument("--state-dir", metavar="DIR", help="state directory (overrides the config)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def _from_db(sdir: Path) -> tuple[JsonDoc | None, float | None, list[JsonDoc]]:
    """``(status document, when written, learned waits)`` from the database. Where the
    database cannot be read but the agent keeps its status in memory (the in-memory
    status file exists), that file answers instead of an error."""
    import sqlite3

    from watchdog.errors import InputError
    from watchdog.store import connect, runtime
    from watchdog.store.agent import read_status, read_waits

    try:
        conn = connect(sdir, readonly=True)
    except InputError:
        if runtime.read(sdir) is not None:
            return None, None, []
        raise
    try:
        doc, written = read_status(conn)
        waits = read_waits(conn)
    except sqlite3.Error as e:
        if runtime.read(sdir) is not None:
            return None, None, []
        raise InputError(f"{sdir}: cannot read the agent's state: {e}") from None
    finally:
        conn.close()
    return doc, written, waits


def _state_dir(args: argparse.Namespace) -> tuple[Path, str | None]:
    """``(state directory, config error)``; a named directory without a database whose
    agent keeps its status in memory (it could never write there) is read too."""
    from watchdog.commands.common import service_state
    from watchdog.errors import InputError
    from watchdog.store import runtime

    try:
        found, broken = service_state(args)
    except InputError:
        named = args.state_dir
        if not named and args.config:
            from watchdog.paths import state_dir_of

            named = state_dir_of(args.config)
        if named and runtime.read(named) is not None:
            from pathlib import Path

            return Path(named), None
        raise
    return found.path, broken


def run(args: argparse.Namespace) -> int:
    from watchdog.service.status import down_sinks, render, stale
    from watchdog.store import runtime

    sdir, broken = _state_dir(args)
    doc, written, waits = _from_db(sdir)
    mem = runtime.read(sdir)  # written only while the agent's state is in memory only
    if mem is not None and (written is None or (mem.get("status_written_at") or 0) > written):
        doc, written = mem, mem.get("status_written_at")
    if doc is None:
        print(f"watchdog: {sdir}: the agent has not written a status yet", file=sys.stderr)
        return 1
    from watchdog.clock import WallClock

    now = WallClock().now()
    old = stale(doc, written, now)
    out: JsonDoc = {**doc, "state_dir": str(sdir), "status_written_at": written,
                           "stale": old, "learned_waits_stored": waits,
                           "config_error": broken}
    if args.json:
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        print(render(out, now))
    return 1 if old or down_sinks(out) else 0
