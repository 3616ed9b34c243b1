"""The agent's own tables: learned state, incidents it raised, and its status.

* ``learned_waits``: the learned ``for:`` of rules such as the hang rule (the longest
  legitimate wait this node has shown, s), per host and rule.
* ``learned_levels``: each GPU's learned idle and busy power (W) and highest SM clock
  seen (MHz), per GPU UUID, so a restart judges power against the GPU's own levels at
  once instead of the enforced limit; ``version`` is the definition they were learned
  under (:data:`watchdog.detect.learned.LEVELS_VERSION`; rows from before it was kept
  read 1), so an upgrade can refuse levels an older definition taught.
* ``incidents``: what the detector raised, with every transition, for ``watchdog status``
  and post-mortems; resolved ones are pruned after ``retention`` (default 90 days).
* ``agent_status``: one row the running agent rewrites every few seconds (uptime, last
  sample, lag, missed ticks, NVML errors, rule evaluation time) for ``watchdog status``.

Rows carry a ``namespace``: ``nvml`` for real GPUs, ``sim`` for a simulated node, so a
simulated source never reads or writes a real node's learned state.
"""

from __future__ import annotations

import json
import sqlite3

from watchdog.incident import Incident
from watchdog.store.db import transaction
from watchdog.store.store import Store
from watchdog.units import RETENTION_S
from watchdog.untyped import JsonDoc

STEPS = (
    """
    CREATE TABLE learned_waits (
        namespace TEXT NOT NULL, host TEXT NOT NULL, rule TEXT NOT NULL,
        state TEXT NOT NULL, updated_at REAL NOT NULL,
        PRIMARY KEY (namespace, host, rule));
    CREATE TABLE learned_levels (
        namespace TEXT NOT NULL, uuid TEXT NOT NULL,
        idle_w REAL, busy_w REAL, max_sm_mhz REAL, updated_at REAL NOT NULL,
        PRIMARY KEY (namespace, uuid));
    CREATE TABLE incidents (
        id TEXT PRIMARY KEY, namespace TEXT NOT NULL, host TEXT NOT NULL,
        kind TEXT NOT NULL, severity TEXT NOT NULL, rule TEXT NOT NULL,
        gpus TEXT NOT NULL, uuids TEXT NOT NULL, started_at REAL NOT NULL,
        fired_at REAL, resolved_at REAL, summary TEXT NOT NULL, evidence TEXT NOT NULL,
        updated_at REAL NOT NULL);
    CREATE INDEX incidents_active ON incidents (resolved_at);
    CREATE TABLE agent_status (
        id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL, updated_at REAL NOT NULL)
    """,
    """
    ALTER TABLE learned_levels ADD COLUMN version INTEGER NOT NULL DEFAULT 1
    """,
)



class AgentStore:
    """The agent's tables; every method is one unit of :class:`Store` work (so a full
    disk moves them to memory instead of failing)."""

    def __init__(self, db: Store, namespace: str) -> None:
        self.db = db
        self.namespace = namespace
        db.migrate("agent", STEPS)

    # --- learned state ----------------------------------------------------------------
    def load_learned(self, host: str) -> tuple[dict[str, JsonDoc],
                                               dict[str, dict[str, float | None]]]:
        """``(waits by rule, levels by GPU uuid)`` saved for this host and namespace; each
        GPU's levels carry the ``version`` of the definition they were learned under."""
        def read(c: sqlite3.Connection) -> tuple[dict[str, JsonDoc],
                                                 dict[str, dict[str, float | None]]]:
            waits = {rule: json.loads(state) for rule, state in c.execute(
                "SELECT rule, state FROM learned_waits WHERE namespace = ? AND host = ?",
                (self.namespace, host))}
            levels = {uuid: {"idle_w": i, "busy_w": b, "max_sm_mhz": m, "version": v}
                      for uuid, i, b, m, v in c.execute(
                          "SELECT uuid, idle_w, busy_w, max_sm_mhz, version "
                          "FROM learned_levels WHERE namespace = ?", (self.namespace,))}
            return waits, levels

        return self.db.run(read)

    def save_learned(self, host: str, waits: dict[str, JsonDoc],
                     levels: dict[str, dict[str, float | None]], now: float,
                     version: int) -> None:
        """Replace what was learned (one transaction: a kill leaves old or new, not half);
        ``version``: the definition the levels were learned under."""
        def write(c: sqlite3.Connection) -> None:
            with transaction(c):
                for rule, state in waits.items():
                    c.execute("INSERT INTO learned_waits VALUES (?, ?, ?, ?, ?) "
                              "ON CONFLICT (namespace, host, rule) DO UPDATE SET "
                              "state = excluded.state, updated_at = excluded.updated_at",
                              (self.namespace, host, rule, json.dumps(state), now))
                for uuid, lv in levels.items():
                    c.execute("INSERT INTO learned_levels VALUES (?, ?, ?, ?, ?, ?, ?) "
                              "ON CONFLICT (namespace, uuid) DO UPDATE SET "
                              "idle_w = excluded.idle_w, busy_w = excluded.busy_w, "
                              "max_sm_mhz = excluded.max_sm_mhz, "
                              "updated_at = excluded.updated_at, version = excluded.version",
                              (self.namespace, uuid, lv.get("idle_w"), lv.get("busy_w"),
                               lv.get("max_sm_mhz"), now, version))

        self.db.run(write)

    # --- incidents ----------------------------------------------------------------------
    def record_incident(self, key: str, inc: Incident, now: float) -> None:
        """Insert or update one incident (called on every transition)."""
        row = (key, self.namespace, inc.host, inc.kind, inc.severity, inc.rule,
               json.dumps(inc.gpus), json.dumps(inc.uuids), inc.started_at, inc.fired_at,
               inc.resolved_at, inc.summary, json.dumps(inc.to_json()["evidence"]), now)
        self.db.run(lambda c: c.execute(
            "INSERT INTO incidents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET gpus = excluded.gpus, uuids = excluded.uuids, "
            "fired_at = excluded.fired_at, resolved_at = excluded.resolved_at, "
            "summary = excluded.summary, evidence = excluded.evidence, "
            "updated_at = excluded.updated_at", row))

    def active_incidents(self) -> list[JsonDoc]:
        """Incidents not resolved, oldest first, as plain dicts."""
        rows = self.db.run(lambda c: c.execute(
            "SELECT id, host, kind, severity, rule, gpus, uuids, started_at, fired_at, "
            "summary FROM incidents WHERE resolved_at IS NULL AND namespace = ? "
            "ORDER BY started_at", (self.namespace,)).fetchall())
        return [{"id": r[0], "host": r[1], "kind": r[2], "severity": r[3], "rule": r[4],
                 "gpus": json.loads(r[5]), "uuids": json.loads(r[6]), "started_at": r[7],
                 "fired_at": r[8], "summary": r[9]} for r in rows]

    def close_open_incidents(self, now: float, why: str) -> int:
        """Mark incidents left active by an earlier run as resolved at ``now`` (the detector
        that held them is gone; if the condition persists it is raised again)."""
        return int(self.db.run(lambda c: c.execute(
            "UPDATE incidents SET resolved_at = ?, updated_at = ?, "
            "summary = summary || ? WHERE resolved_at IS NULL AND namespace = ?",
            (now, now, f" [{why}]", self.namespace)).rowcount))

    # --- status ---------------------------------------------------------------------------
    def write_status(self, doc: JsonDoc, now: float) -> None:
        text = json.dumps(doc)
        self.db.run(lambda c: c.execute(
            "INSERT INTO agent_status VALUES (1, ?, ?) ON CONFLICT (id) DO "
            "UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at", (text, now)))

    # --- retention ------------------------------------------------------------------------
    def prune(self, now: float, retention_s: float = RETENTION_S) -> int:
        """Delete incidents resolved more than ``retention_s`` ago and learned levels of
        GPUs not seen for as long (a replaced board). Returns rows deleted."""
        cut = now - retention_s

        def delete(c: sqlite3.Connection) -> int:
            n = c.execute("DELETE FROM incidents WHERE resolved_at IS NOT NULL "
                          "AND resolved_at < ?", (cut,)).rowcount
            return n + c.execute("DELETE FROM learned_levels WHERE updated_at < ?",
                                 (cut,)).rowcount

        return int(self.db.run(delete))


def read_status(conn: sqlite3.Connection) -> tuple[JsonDoc | None, float | None]:
    """The last status document and when it was written (None when never)."""
    try:
        row = conn.execute("SELECT doc, updated_at FROM agent_status WHERE id = 1").fetchone()
    except sqlite3.OperationalError:  # tables not created yet
        return None, None
    return (json.loads(row[0]), row[1]) if row else (None, None)


def read_active(conn: sqlite3.Connection) -> list[JsonDoc]:
    """Active incidents of every namespace (read-only access for ``watchdog status``)."""
    try:
        rows = conn.execute(
            "SELECT id, host, kind, severity, rule, gpus, started_at, fired_at, summary "
            "FROM incidents WHERE resolved_at IS NULL ORDER BY started_at").fetchall()
    except sqlite3.OperationalError:
        return []
    return [{"id": r[0], "host": r[1], "kind": r[2], "severity": r[3], "rule": r[4],
             "gpus": json.loads(r[5]), "started_at": r[6], "fired_at": r[7],
             "summary": r[8]} for r in rows]


def read_waits(conn: sqlite3.Connection) -> list[JsonDoc]:
    """Learned waits of every namespace and host."""
    try:
        rows = conn.execute("SELECT namespace, host, rule, state, updated_at "
                            "FROM learned_waits ORDER BY host, rule").fetchall()
    except sqlite3.OperationalError:
        return []
    return [{"namespace": r[0], "host": r[1], "rule": r[2], **json.loads(r[3]),
             "updated_at": r[4]} for r in rows]


def agent_wall(conn: sqlite3.Connection, wall: float) -> float:
    """Real time on the running agent's timeline. The agent keeps the time it started with
    (plus the monotonic clock) when the system clock is stepped; a silence added or
    listed from another process must use the same timeline, or "for 2h" after a step
    back of an hour would mute for one hour. ``wall``: this process's ``time.time()``."""
    doc, _ = read_status(conn)
    if not doc or doc.get("stopped_at") is not None:
        return wall
    offset = doc.get("clock_offset_s")
    if isinstance(offset, int | float) and abs(offset) >= 1.0:
        return wall - float(offset)
    return wall
