"""The bounded outbox: what gives way when a sink's queue is full, never a group's last state.

Each sink's outbox holds at most ``outbox_max`` pending notifications. A notification
carries its whole group as it stands (every alert of the group, firing or resolved), so a
later one of the same group supersedes the earlier ones: once it is queued, they only
repeat what it says. When a new notification finds the queue full (a sink down for longer
than the queue lasts), room is made in this order, and nothing else is ever dropped:

1. the pending notifications of its own group: merged into it (a resolve replaces its own
   firing), their changed alerts added to its own, so a sink that sends per alert
   (PagerDuty: one event per changed alert) still sends every alert's newest state;
2. a queued reminder (``repeat``, ``refresh``): it says nothing the group's newest
   notification does not;
3. the older notifications of another group with more than one pending: merged into that
   group's newest, the same way;
4. the oldest queued notice about the agent itself (``meta``);
5. the oldest pending notification of a group that has resolved entirely and whose sink
   never heard of it firing (nothing was ever delivered to it for that group): the
   receiver keeps no page open for it.

If none of these makes room, every pending row is the newest state of a group the
receiver needs, and the new one is queued beyond the bound (the overflow is one row per
group, and groups are few: one per host and job); only a ``meta`` notice is refused then.
What was dropped or merged away is counted per sink (``notify_dropped``), for ``watchdog
alerts``, ``watchdog status`` and the ``watchdog_notify_dropped`` metric.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from watchdog.notify import store as st
from watchdog.notify.base import Notification

STEPS = ["""
CREATE TABLE notify_dropped (
    sink TEXT PRIMARY KEY, dropped INTEGER NOT NULL DEFAULT 0, last_at REAL,
    last_what TEXT);
"""]
REMINDERS = ("repeat", "refresh")


def merged(newest: Notification, older: list[Notification]) -> Notification:
    """``newest`` with the changes of the ``older`` notifications of its group: their
    changed alerts added to its own; a reminder takes the newest real reason among them
    (a PagerDuty sink skips reminders, and the merged row carries real changes)."""
    changed = set(newest.changed)
    reason = newest.reason
    for o in sorted(older, key=lambda x: x.created_at, reverse=True):
        changed.update(o.changed)
        if reason in REMINDERS and o.reason not in REMINDERS:
            reason = o.reason
    have = {a.fingerprint for a in newest.alerts}
    return replace(newest, reason=reason, changed=tuple(sorted(c for c in changed if c in have)))


Room = tuple[Notification | None, int, str]


def make_room(c: sqlite3.Connection, n: Notification, limit: int) -> Room:
    """Room for ``n`` in its sink's queue (inside the caller's transaction). Returns the
    notification to insert (``n``, or ``n`` with its group's pending rows merged in; None:
    refused), how many rows were dropped or merged away (the refused one included) and
    what, in words."""
    sink = n.sink
    (pending,) = c.execute("SELECT COUNT(*) FROM notify_outbox WHERE sink = ? AND state = "
                           "'pending'", (sink,)).fetchone()
    if pending < limit:
        return n, 0, ""
    # 1. its own group
    rows = _pending(c, sink, "group_key = ?", (n.group_key,))
    if rows and n.reason != "meta":
        _delete(c, [rid for rid, _ in rows])
        return merged(n, [o for _, o in rows]), len(rows), (
            f"{len(rows)} superseded notification(s) of group {n.group_key} merged into "
            "its newest")
    # 2. a reminder
    cur = c.execute("DELETE FROM notify_outbox WHERE id = (SELECT id FROM notify_outbox "
                    "WHERE sink = ? AND state = 'pending' AND reason IN ('repeat', 'refresh') "
                    "ORDER BY id LIMIT 1)", (sink,))
    if cur.rowcount:
        return n, 1, "a queued reminder (repeat) dropped"
    # 3. another group's older rows
    row = c.execute("SELECT group_key FROM notify_outbox WHERE sink = ? AND state = 'pending' "
                    "AND reason != 'meta' GROUP BY group_key HAVING COUNT(*) > 1 ORDER BY "
                    "MIN(id) LIMIT 1", (sink,)).fetchone()
    if row is not None:
        rows = _pending(c, sink, "group_key = ?", (row[0],))
        (newest_id, newest), older = rows[-1], rows[:-1]
        c.execute("UPDATE notify_outbox SET doc = ?, reason = ? WHERE id = ?",
                  (st.notification_to_json(m := merged(newest, [o for _, o in older])),
                   m.reason, newest_id))
        _delete(c, [rid for rid, _ in older])
        return n, len(older), (f"{len(older)} superseded notification(s) of group {row[0]} "
                               "merged into its newest")
    # 4. a notice about the agent itself
    if n.reason != "meta":
        cur = c.execute("DELETE FROM notify_outbox WHERE id = (SELECT id FROM notify_outbox "
                        "WHERE sink = ? AND state = 'pending' AND reason = 'meta' ORDER BY id "
                        "LIMIT 1)", (sink,))
        if cur.rowcount:
            return n, 1, "the oldest notice about the agent itself dropped"
    # 5. a group that resolved entirely and that the sink never heard of
    for rid, o in _pending(c, sink, "reason != 'meta'", ()):
        if all(a.status == "resolved" for a in o.alerts) and c.execute(
                "SELECT 1 FROM notify_outbox WHERE sink = ? AND group_key = ? AND state = "
                "'sent' LIMIT 1", (sink, o.group_key)).fetchone() is None:
            _delete(c, [rid])
            return n, 1, f"group {o.group_key}, resolved before its sink heard of it, dropped"
    if n.reason == "meta":
        return None, 1, f"a notice about the agent itself refused ({pending} pending)"
    return n, 0, ""  # every pending row is a group's newest state: the bound gives way


def _pending(c: sqlite3.Connection, sink: str, where: str,
             args: tuple[object, ...]) -> list[tuple[int, Notification]]:
    return [(rid, st.notification_from_json(doc)) for rid, doc in c.execute(
        f"SELECT id, doc FROM notify_outbox WHERE sink = ? AND state = 'pending' AND {where} "
        "ORDER BY id", (sink, *args))]


def _delete(c: sqlite3.Connection, ids: list[int]) -> None:
    c.executemany("DELETE FROM notify_outbox WHERE id = ?", [(i,) for i in ids])


def count(c: sqlite3.Connection, sink: str, n: int, when: float, what: str) -> None:
    """Add ``n`` dropped rows to ``sink``'s count (``what``: the last, in words)."""
    c.execute("INSERT INTO notify_dropped (sink, dropped, last_at, last_what) VALUES "
              "(?, ?, ?, ?) ON CONFLICT(sink) DO UPDATE SET dropped = dropped + excluded.dropped,"
              " last_at = excluded.last_at, last_what = excluded.last_what",
              (sink, n, when, what))


def dropped(c: sqlite3.Connection) -> dict[str, int]:
    """Rows dropped or merged away per sink, since the state database was made."""
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "notify_dropped" not in tables:
        return {}
    return dict(c.execute("SELECT sink, dropped FROM notify_dropped").fetchall())

