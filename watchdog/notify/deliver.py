"""Delivery: one worker thread per sink drains that sink's outbox rows in order.

Order matters (a PagerDuty trigger retried after its resolve re-opens the incident), so a
worker only ever sends the oldest pending row of its sink; later rows wait behind a row in
backoff. A row is marked ``sent`` only after the sink accepted it. Transient failures back
off exponentially with jitter (1 s doubling to 5 min) or exactly as long as ``Retry-After``
says; a client-side rate limit (``sink.rate_per_s``) spaces sends. An undeliverable row
(a 4xx) is marked ``failed`` and reported; a sink failing for longer than
``sink_fail_after`` is reported once. Backoff and rate limits run on the wall clock: they
are about the remote service, not about the node's (possibly simulated) time.
"""

from __future__ import annotations

import logging
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog.notify import store as st
from watchdog.notify.base import Accepted, Failed, Retry

log = logging.getLogger("watchdog.notify")

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0


class Worker(threading.Thread):
    """Sends ``sink``'s outbox rows, oldest first. ``events`` receives ``(kind, sink, text)``
    for the notifier to report (``failed``, ``failing``, ``recovered``)."""

    def __init__(self, sink: Any, connect: Callable[[], sqlite3.Connection],
                 events: queue.Queue[tuple[str, str, str]], fail_after: float,
                 wall: Callable[[], float] = time.time, seed: int | None = None,
                 speed: float = 1.0) -> None:
        super().__init__(name=f"notify-{sink.name}", daemon=True)
        self.sink = sink
        self._connect = connect
        self.events = events
        self.fail_after = fail_after
        self.wall = wall
        self.speed = speed  # a benchmark's compressed wall clock runs this much faster
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.busy = threading.Event()
        self._rng = random.Random(seed)
        self._last_send = -1e18
        self.sent = 0
        self.failed = 0

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        conn = self._connect()
        try:
            while not self.stopping.is_set():
                delay = self._step(conn)
                if delay:
                    self.wake.wait(delay / self.speed)
                    self.wake.clear()
        except Exception as e:  # noqa: BLE001 - a worker crash must be seen, not silent
            log.error("delivery to %s stopped: %s: %s", self.sink.name, type(e).__name__, e)
        finally:
            conn.close()

    def _step(self, conn: sqlite3.Connection) -> float:
        """Try the oldest pending row; returns how long to wait before the next try (s)."""
        row = st.next_pending(conn, self.sink.name)
        if row is None:
            return 1.0
        rid, n, attempts, next_at = row
        now = self.wall()
        if next_at > now:
            return min(next_at - now, 1.0)
        rate = getattr(self.sink, "rate_per_s", None)
        if rate:
            gap = 1.0 / rate - (now - self._last_send)
            if gap > 0:
                return gap
        memory = st.get_memory(conn, self.sink.name, n.group_key)
        self.busy.set()
        try:
            try:
                result = self.sink.send(n, memory)
            except Exception as e:  # noqa: BLE001 - a sink bug is a retry, never a lost page
                result = Retry(f"{type(e).__name__}: {e}")
            self._last_send = self.wall()
            self._record(conn, rid, n.group_key, attempts, result)
        finally:
            self.busy.clear()
        return 0.0

    def _record(self, conn: sqlite3.Connection, rid: int, group: str, attempts: int,
                result: Any) -> None:
        now = self.wall()
        name = self.sink.name
        with st.transaction(conn):
            if result.memory:
                st.put_memory(conn, name, group, result.memory)
            if isinstance(result, Accepted):
                conn.execute("UPDATE notify_outbox SET state = 'sent', sent_at = ?, attempts = ? "
                             "WHERE id = ?", (now, attempts + 1, rid))
                was = conn.execute("SELECT failing_since, reported FROM notify_sinks WHERE "
                                   "sink = ?", (name,)).fetchone()
                conn.execute("INSERT INTO notify_sinks (sink, failing_since, last_error, "
                             "reported) VALUES (?, NULL, NULL, 0) ON CONFLICT(sink) DO UPDATE "
                             "SET failing_since = NULL, reported = 0", (name,))
                self.sent += 1
                if was and was[1]:
                    self.events.put(("recovered", name, f"sink {name} delivers again"))
                return
            if isinstance(result, Failed):
                conn.execute("UPDATE notify_outbox SET state = 'failed', last_error = ?, "
                             "attempts = ? WHERE id = ?", (result.error, attempts + 1, rid))
                conn.execute("INSERT INTO notify_sinks (sink, last_error) VALUES (?, ?) "
                             "ON CONFLICT(sink) DO UPDATE SET last_error = excluded.last_error",
                             (name, result.error))
                self.failed += 1
                log.error("sink %s refused a notification (not retried): %s", name,
                          result.error)
                self.events.put(("failed", name, f"sink {name} refused a notification: "
                                 f"{result.error}"))
                return
            delay = result.after if result.after is not None else self._backoff(attempts)
            conn.execute("UPDATE notify_outbox SET attempts = ?, next_at = ?, last_error = ? "
                         "WHERE id = ?", (attempts + 1, now + delay, result.error, rid))
            conn.execute("INSERT INTO notify_sinks (sink, failing_since, last_error) VALUES "
                         "(?, ?, ?) ON CONFLICT(sink) DO UPDATE SET failing_since = "
                         "COALESCE(notify_sinks.failing_since, excluded.failing_since), "
                         "last_error = excluded.last_error", (name, now, result.error))
            since, reported = conn.execute("SELECT failing_since, reported FROM notify_sinks "
                                           "WHERE sink = ?", (name,)).fetchone()
            if now - since >= self.fail_after and not reported:
                conn.execute("UPDATE notify_sinks SET reported = 1 WHERE sink = ?", (name,))
                self.events.put(("failing", name, f"sink {name} has failed for "
                                 f"{(now - since) / 60:.0f} min: {result.error}"))
        log.warning("sink %s: %s (retry in %.1f s)", name, result.error, delay)

    def _backoff(self, attempts: int) -> float:
        base = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(attempts, 20))
        return base * self._rng.uniform(0.8, 1.2)
