"""Durable alerting state in the agent's SQLite database (component ``notify``).

Tables: ``notify_alerts`` (every incident the policy knows, by fingerprint, with its hold
and flap history), ``notify_groups`` (per group and sink: when it was created and last
notified, and what that notification said), ``notify_outbox`` (notifications in order,
``pending`` until the sink accepted them), ``notify_memory`` (what a sink remembers of a
group: Slack channel and ``ts``, PagerDuty's last action per key), ``notify_silences`` and
``notify_sinks`` (failing since, last error).

The policy writes an alert's new state, its group's sent-state and the outbox rows in ONE
transaction, so a kill -9 at any point leaves either the old state (the change is seen
again and queued again) or the new state with its rows queued: never a change marked
notified whose notification is not in the outbox. The delivery workers mark a row sent
only after the sink accepted it (at-least-once; sinks make repeats harmless where the
service allows: PagerDuty's ``dedup_key``, Slack's remembered ``ts``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict

from watchdog.notify.base import Alert, Notification
from watchdog.store.db import migrate, transaction
from watchdog.untyped import Json, JsonDoc

STEPS = ["""
CREATE TABLE notify_alerts (
    fp TEXT PRIMARY KEY, group_key TEXT NOT NULL, doc TEXT NOT NULL, state TEXT NOT NULL,
    hold_until REAL, fires TEXT NOT NULL DEFAULT '[]', updated_at REAL NOT NULL);
CREATE TABLE notify_groups (
    group_key TEXT NOT NULL, sink TEXT NOT NULL, created_at REAL NOT NULL,
    last_sent_at REAL, sent TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (group_key, sink));
CREATE TABLE notify_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sink TEXT NOT NULL, group_key TEXT NOT NULL,
    reason TEXT NOT NULL, doc TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0, next_at REAL NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, sent_at REAL, last_error TEXT);
CREATE INDEX notify_outbox_pending ON notify_outbox (sink, state, id);
CREATE TABLE notify_memory (
    sink TEXT NOT NULL, group_key TEXT NOT NULL, memory TEXT NOT NULL,
    PRIMARY KEY (sink, group_key));
CREATE TABLE notify_silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT, gpu TEXT, kind TEXT,
    starts_at REAL NOT NULL, ends_at REAL NOT NULL, comment TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '', expired_at REAL);
CREATE TABLE notify_sinks (
    sink TEXT PRIMARY KEY, failing_since REAL, last_error TEXT,
    reported INTEGER NOT NULL DEFAULT 0);
"""]


def open_store(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Create or upgrade the notify tables on ``conn``; returns it."""
    migrate(conn, "notify", STEPS)
    return conn


# --- (de)serialising -----------------------------------------------------------------------
def alert_to_json(a: Alert) -> str:
    return json.dumps(asdict(a), default=_plain)


def alert_from_json(text: str) -> Alert:
    d = json.loads(text)
    d["gpus"] = tuple(d["gpus"])
    d["uuids"] = tuple(d["uuids"])
    return Alert(**d)


def notification_to_json(n: Notification) -> str:
    return json.dumps(asdict(n), default=_plain)


def notification_from_json(text: str) -> Notification:
    d = json.loads(text)
    alerts = []
    for a in d["alerts"]:
        a["gpus"], a["uuids"] = tuple(a["gpus"]), tuple(a["uuids"])
        alerts.append(Alert(**a))
    d["alerts"] = tuple(alerts)
    d["changed"] = tuple(d["changed"])
    return Notification(**d)


def _plain(v: object) -> Json:
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, set | frozenset | tuple):
        return list(v)
    return str(v)


# --- outbox queries used by the workers and the commands -------------------------------------
def next_pending(conn: sqlite3.Connection, sink: str) -> tuple[int, Notification, int,
                                                                float] | None:
    """The oldest pending row of ``sink``: (id, notification, attempts, next_at)."""
    row = conn.execute("SELECT id, doc, attempts, next_at FROM notify_outbox WHERE sink = ? "
                       "AND state = 'pending' ORDER BY id LIMIT 1", (sink,)).fetchone()
    if row is None:
        return None
    return row[0], notification_from_json(row[1]), row[2], row[3]


def pending_counts(conn: sqlite3.Connection) -> dict[str, tuple[int, float | None]]:
    """Per sink: (pending rows, creation time of the oldest; wall clock)."""
    return {s: (n, t) for s, n, t in conn.execute(
        "SELECT sink, COUNT(*), MIN(created_at) FROM notify_outbox WHERE state = 'pending' "
        "GROUP BY sink")}


def get_memory(conn: sqlite3.Connection, sink: str, group: str) -> JsonDoc:
    row = conn.execute("SELECT memory FROM notify_memory WHERE sink = ? AND group_key = ?",
                       (sink, group)).fetchone()
    return json.loads(row[0]) if row else {}


def put_memory(conn: sqlite3.Connection, sink: str, group: str, memory: JsonDoc) -> None:
    conn.execute("INSERT INTO notify_memory (sink, group_key, memory) VALUES (?, ?, ?) "
                 "ON CONFLICT(sink, group_key) DO UPDATE SET memory = excluded.memory",
                 (sink, group, json.dumps(memory, default=_plain)))


# --- silences --------------------------------------------------------------------------------
def add_silence(conn: sqlite3.Connection, *, host: str | None, gpu: str | None,
                kind: str | None, starts_at: float, ends_at: float, comment: str,
                created_by: str) -> int:
    with transaction(conn):
        cur = conn.execute(
            "INSERT INTO notify_silences (host, gpu, kind, starts_at, ends_at, comment, "
            "created_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (host, gpu, kind, starts_at, ends_at, comment, created_by))
    return int(cur.lastrowid or 0)


def expire_silence(conn: sqlite3.Connection, sid: int, now: float) -> bool:
    with transaction(conn):
        cur = conn.execute("UPDATE notify_silences SET expired_at = ? WHERE id = ? AND "
                           "expired_at IS NULL AND ends_at > ?", (now, sid, now))
    return cur.rowcount > 0


def silences(conn: sqlite3.Connection, now: float, *, all_: bool = False) -> list[JsonDoc]:
    """Active silences (or every one with ``all_``), oldest first. Times: wall clock."""
    q = ("SELECT id, host, gpu, kind, starts_at, ends_at, comment, created_by, expired_at "
         "FROM notify_silences")
    if not all_:
        q += " WHERE expired_at IS NULL AND ends_at > ? ORDER BY id"
        rows = conn.execute(q, (now,)).fetchall()
    else:
        rows = conn.execute(q + " ORDER BY id").fetchall()
    keys = ("id", "host", "gpu", "kind", "starts_at", "ends_at", "comment", "created_by",
            "expired_at")
    return [dict(zip(keys, r, strict=True)) for r in rows]
