"""Delivery: one worker thread per sink drains that sink's outbox rows in order.

Order matters (a PagerDuty trigger retried after its resolve re-opens the incident), so a
worker only ever sends the oldest pending row of its sink; later rows wait behind a row in
backoff. A row is marked ``sent`` only after the sink accepted it. Transient failures back
off exponentially with jitter (1 s doubling to 5 min) or exactly as long as ``Retry-After``
says, up to :data:`RETRY_AFTER_MAX_S` (1 h: a sink asking for more is retried after 1 h
and reported failing at once, not silently parked for years); a client-side rate limit
(``sink.rate_per_s``) spaces sends. An undeliverable row
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

from watchdog.logs import redact
from watchdog.notify import store as st
from watchdog.notify.base import Accepted, Failed, Result, Retry, Sink
from watchdog.store.store import Store

log = logging.getLogger("watchdog.notify")

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 300.0
#: the longest ``Retry-After`` honoured; a longer one is retried after this long and the
#: sink is reported failing at once (docs/alerting.md, "Hostile sinks")
RETRY_AFTER_MAX_S = 3600.0
STEP_RETRY_S = 5.0  # after a step failed for a reason other than the sink
#: a row due further ahead than this was stamped on another clock (the wall clock stepped
#: between two runs): it is due now
MAX_WAIT_S = 3600.0 + BACKOFF_MAX_S


class Worker(threading.Thread):
    """Sends ``sink``'s outbox rows, oldest first. ``events`` receives ``(kind, sink, text)``
    for the notifier to report (``failed``, ``failing``, ``recovered``)."""

    def __init__(self, sink: Sink, db: Store,
                 events: queue.Queue[tuple[str, str, str]], fail_after: float,
                 wall: Callable[[], float] = time.time, seed: int | None = None,
                 speed: float = 1.0) -> None:
        super().__init__(name=f"notify-{sink.name}", daemon=True)
        self.sink = sink
        self.db = db
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
        # refusals since the sink last accepted something, in this run: a sink whose
        # latest answer was a refusal (a wrong token: every page refused) is down
        self.refused = 0
        self.refused_since: float | None = None
        self.refused_error: str | None = None

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        """Deliver until stopped. A failing step (the state database unreadable, a bug) is
        logged once per kind of error and retried: delivery never stops for good."""
        last_error = None
        while not self.stopping.is_set():
            try:
                delay = self._step()
                last_error = None
            except Exception as e:  # noqa: BLE001 - a worker must outlive any one failure
                text = f"{type(e).__name__}: {e}"
                if text != last_error:
                    log.error("delivery to %s failed: %s (retrying every %.0f s)",
                              self.sink.name, text, STEP_RETRY_S)
                last_error = text
                delay = STEP_RETRY_S
            if delay:
                self.wake.wait(delay / self.speed)
                self.wake.clear()

    def _step(self) -> float:
        """Try the oldest pending row; returns how long to wait before the next try (s)."""
        name = self.sink.name
        row = self.db.run(lambda c: st.next_pending(c, name))
        if row is None:
            return 1.0
        rid, n, attempts, next_at = row
        now = self.wall()
        if next_at > now + MAX_WAIT_S:  # stamped on another clock (stepped, restarted)
            next_at = now
        if next_at > now:
            return min(next_at - now, 1.0)
        rate = getattr(self.sink, "rate_per_s", None)
        if rate:
            gap = 1.0 / rate - (now - self._last_send)
            if gap > 0:
                return gap
        memory = self.db.run(lambda c: st.get_memory(c, name, n.group_key))
        self.busy.set()
        try:
            try:
                result = self.sink.send(n, memory)
            except Exception as e:  # noqa: BLE001 - a sink bug is a retry, never a lost page
                result = Retry(redact(f"{type(e).__name__}: {e}"))
            self._last_send = self.wall()
            self.db.run(lambda c: self._record(c, rid, n.group_key, attempts, result))
        finally:
            self.busy.clear()
        return 0.0

    def _record(self, conn: sqlite3.Connection, rid: int, group: str, attempts: int,
                result: Result) -> None:
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
                if self.refused:
                    self.refused, self.refused_since, self.refused_error = 0, None, None
                    self.events.put(("recovered", name, f"sink {name} accepts notifications "
                                     "again"))
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
                self.refused += 1
                self.refused_since = self.refused_since or now
                self.refused_error = result.error
                log.error("sink %s refused a notification (not retried): %s", name,
                          result.error)
                self.events.put(("failed", name, f"sink {name} refused a notification: "
                                 f"{result.error}"))
                return
            delay, absurd = self._retry_delay(result, attempts)
            conn.execute("UPDATE notify_outbox SET attempts = ?, next_at = ?, last_error = ? "
                         "WHERE id = ?", (attempts + 1, now + delay, result.error, rid))
            conn.execute("INSERT INTO notify_sinks (sink, failing_since, last_error) VALUES "
                         "(?, ?, ?) ON CONFLICT(sink) DO UPDATE SET failing_since = "
                         "COALESCE(notify_sinks.failing_since, excluded.failing_since), "
                         "last_error = excluded.last_error", (name, now, result.error))
            since, reported = conn.execute("SELECT failing_since, reported FROM notify_sinks "
                                           "WHERE sink = ?", (name,)).fetchone()
            if (absurd or now - since >= self.fail_after) and not reported:
                conn.execute("UPDATE notify_sinks SET reported = 1 WHERE sink = ?", (name,))
                self.events.put(("failing", name, f"sink {name} asks to wait "
                                 f"{_span(result.after)} (Retry-After); retrying in "
                                 f"{RETRY_AFTER_MAX_S / 3600:g} h instead: {result.error}"
                                 if absurd else f"sink {name} has failed for "
                                 f"{(now - since) / 60:.0f} min: {result.error}"))
        log.warning("sink %s: %s (retry in %.1f s)", name, result.error, delay)

    def _retry_delay(self, result: Retry, attempts: int) -> tuple[float, bool]:
        """Seconds until the next try, and whether the sink asked for more than
        :data:`RETRY_AFTER_MAX_S` (then that cap). No, a negative or a NaN ``after``: the
        backoff."""
        after = result.after
        if after is None or not after >= 0:
            return self._backoff(attempts), False
        if after > RETRY_AFTER_MAX_S:
            return RETRY_AFTER_MAX_S, True
        return float(after), False

    def _backoff(self, attempts: int) -> float:
        base = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** min(attempts, 20))
        return base * self._rng.uniform(0.8, 1.2)


def _span(seconds: float | None) -> str:
    """A long wait in words: ``31 years``, ``12 days``, ``5.0 h``, ``forever``."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "forever"
    if seconds >= 2 * 365 * 86400:
        return f"{seconds / (365.25 * 86400):.0f} years"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    return f"{seconds / 3600:.1f} h"
