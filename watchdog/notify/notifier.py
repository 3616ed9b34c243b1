"""The alerting facade the live pipeline calls: ``observe``, ``tick``, ``status``, ``drain``,
``close``.

It owns the policy (on the pipeline's tick thread and the pipeline's clock) and one
delivery worker per sink (their own threads, database connections and the wall clock).
The agent's own trouble (a sink refusing a notification, a sink failing for longer than
``sink_fail_after``, a full outbox) is logged and shown in ``watchdog status``. A sink that
is *down* (:meth:`Notifier.down`: its latest answer in this run was a refusal, such as
Slack's ``invalid_auth`` for a wrong token, or it has failed for ``sink_fail_after``)
becomes an ``agent`` incident of the pipeline's, routed to the sinks that work
(:mod:`watchdog.pipeline.own`), and ``watchdog_notify_sink_up`` 0.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import time
from collections.abc import Callable

from watchdog.incident import Incident
from watchdog.notify import outbox
from watchdog.notify import store as st
from watchdog.notify.base import Sink
from watchdog.notify.config import NotifyConfig
from watchdog.notify.deliver import Worker
from watchdog.notify.policy import JobClear, JobOf, Policy, RuleInfo
from watchdog.store.store import Store
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.notify")


def build_sinks(cfg: NotifyConfig) -> dict[str, Sink]:
    """Every sink of the config, built (secrets read) now: errors are InputError."""
    from watchdog.notify.sinks import build_sink

    return {s.name: build_sink(s.name, s.type, s.options, s.where) for s in cfg.sinks}


class Notifier:
    """Alerting for one agent. ``db`` is the agent's state database (each thread works on
    it in units, see :class:`~watchdog.store.store.Store`); ``clock()`` is the
    pipeline's clock; ``wall()`` real time for silences, outbox rows and retries."""

    def __init__(self, cfg: NotifyConfig, db: Store, clock: Callable[[], float],
                 host: str | None, rule_info: RuleInfo, sinks: dict[str, Sink] | None = None,
                 start: bool = True, wall: Callable[[], float] = time.time,
                 speed: float = 1.0, job_of: JobOf | None = None,
                 job_clear: JobClear | None = None) -> None:
        self.cfg = cfg
        self.db = db
        self.clock = clock
        self.sinks = build_sinks(cfg) if sinks is None else sinks
        self.policy = Policy(cfg, db, host, rule_info, clock(), wall=wall, job_of=job_of,
                             job_clear=job_clear)
        self.resend = {name: s.resend_interval for name, s in self.sinks.items()}
        self.events: queue.Queue[tuple[str, str, str]] = queue.Queue()
        self.wall = wall
        self.workers_speed = speed
        self.workers = {name: Worker(s, db, self.events, cfg.sink_fail_after, wall,
                                     speed=speed) for name, s in self.sinks.items()}
        self._status: JsonDoc = {}
        self._status_at = -1e18
        self.problems: list[str] = []
        if start:
            self.start()

    def start(self) -> None:
        for w in self.workers.values():
            if not w.is_alive() and not w.stopping.is_set():
                w.start()

    # --- the pipeline's calls ----------------------------------------------------------------
    def observe(self, changes: list[tuple[str, Incident]]) -> None:
        self.policy.observe(changes, self.clock())

    def tick(self, now: float) -> None:
        self._report_events()
        queued = self.policy.tick(now, self.resend)
        for n in queued:
            w = self.workers.get(n.sink)
            if w is not None:
                w.wake.set()
        if time.monotonic() - self._status_at >= 5.0:
            self._refresh_status()

    def _report_events(self) -> None:
        """The workers' news (a refusal, a sink failing, recovering) into ``problems``;
        the status (and :meth:`down`) is refreshed now rather than within 5 s. The other
        sinks hear of a down sink through its ``agent`` incident, which resolves when it
        recovers (no message per refusal)."""
        while True:
            try:
                _kind, _sink, text = self.events.get_nowait()
            except queue.Empty:
                return
            self.problems = [*self.problems[-9:], text]
            self._status_at = -1e18

    def drain(self, seconds: float | None = None) -> int:
        """Give the workers up to ``seconds`` (default ``drain_timeout``) to empty the
        outbox; returns how many rows are left (delivered after the next start)."""
        limit = self.cfg.drain_timeout if seconds is None else seconds
        end = time.monotonic() + limit

        def counts(c: sqlite3.Connection) -> tuple[int, int]:
            left = sum(n for n, _ in st.pending_counts(c).values())
            # rows that become due before the drain time is up are waited for
            horizon = self.wall() + (end - time.monotonic()) * self.workers_speed
            due = c.execute("SELECT COUNT(*) FROM notify_outbox WHERE state = 'pending' "
                            "AND next_at <= ?", (horizon,)).fetchone()[0]
            return left, due

        while True:
            left, due = self.db.run(counts)
            if left == 0 or (due == 0 and not any(w.busy.is_set()
                                                 for w in self.workers.values())):
                break
            if time.monotonic() >= end:
                break
            for w in self.workers.values():
                w.wake.set()
            time.sleep(0.05)
        if left:
            log.warning("%d notification(s) still queued at stop: sent after the next start",
                        left)
        return left

    def close(self) -> None:
        for w in self.workers.values():
            w.stop()
        for w in self.workers.values():
            if w.is_alive():
                w.join(timeout=5.0)
        for s in self.sinks.values():
            try:
                s.close()
            except Exception as e:  # noqa: BLE001 - closing anyway
                log.warning("closing sink %s: %s", getattr(s, "name", s), e)

    # --- status ---------------------------------------------------------------------------------
    def status(self) -> JsonDoc:
        """For ``watchdog status`` (cached: safe to call from the metrics thread)."""
        return self._status or {"sinks": {}}

    def down(self) -> dict[str, tuple[str, str]]:
        """Sinks that are down now: name -> (severity, why in words) of the ``agent``
        incident about each (:meth:`_down`); from the cached status."""
        return {name: (s["down_severity"], s["down"])
                for name, s in (self._status.get("sinks") or {}).items() if s.get("down")}

    def _down(self, w: Worker, failing_since: float | None, error: str | None,
              wall: float) -> JsonDoc:
        """``down`` (why in words, or None) and ``down_severity``: critical when the sink
        carries critical pages (the routes send it some), else warning."""
        name = w.sink.name
        why = None
        if w.refused:
            at = time.strftime("%H:%M UTC", time.gmtime(w.refused_since or wall))
            why = (f"alerting sink {name} ({w.sink.type}) refuses every notification since "
                   f"{at} ({w.refused} refused, not retried): {w.refused_error}. Pages routed "
                   f"only to {name} are lost: fix its token, URL or channel, then run "
                   "`watchdog alerts test --config FILE`")
        elif failing_since is not None and wall - failing_since >= self.cfg.sink_fail_after:
            why = (f"alerting sink {name} ({w.sink.type}) has failed for "
                   f"{(wall - failing_since) / 60:.0f} min (retrying): {error}. Its pages "
                   "wait in the outbox and go out once it answers")
        from watchdog.incident import KINDS

        critical = any(name in self.cfg.sinks_for("critical", k) for k in KINDS)
        return {"down": why, "down_severity": "critical" if critical else "warning"}

    def _refresh_status(self) -> None:
        self._status_at = time.monotonic()
        wall = self.wall()

        def read(c: sqlite3.Connection) -> tuple[
                dict[str, tuple[int, float | None]], dict[str, tuple[float | None, str | None]],
                dict[str, int], dict[str, int], int, dict[str, int]]:
            return (st.pending_counts(c),
                    {r[0]: r[1:] for r in c.execute(
                        "SELECT sink, failing_since, last_error FROM notify_sinks")},
                    dict(c.execute("SELECT sink, COUNT(*) FROM notify_outbox WHERE state = "
                                   "'failed' GROUP BY sink").fetchall()),
                    dict(c.execute("SELECT sink, COUNT(*) FROM notify_outbox WHERE state = "
                                   "'sent' GROUP BY sink").fetchall()),
                    len(st.silences(c, wall)), outbox.dropped(c))

        pend, rows, failed, sent, silences, dropped = self.db.run(read)
        sinks = {}
        for name, s in self.sinks.items():
            n, oldest = pend.get(name, (0, None))
            since, err = rows.get(name, (None, None))
            w = self.workers[name]
            sinks[name] = {"type": s.type, "pending": n, "sent": sent.get(name, 0),
                           "oldest_pending_s": None if oldest is None else round(wall - oldest, 1),
                           "failing_since": since, "last_error": err,
                           "undeliverable": failed.get(name, 0),
                           "refused": w.refused, "refused_since": w.refused_since,
                           "dropped": dropped.get(name, 0),
                           **self._down(w, since, err, wall)}
        firing = sum(1 for a in self.policy.alerts.values() if a.state != "resolved")
        self._status = {"sinks": sinks, "alerts_firing": firing,
                        "dropped": sum(dropped.values()),
                        "silences": silences, "problems": self.problems[-5:]}


def for_agent(cfg: NotifyConfig, db: Store, clock: Callable[[], float], host: str | None,
              rule_info: RuleInfo, sinks: dict[str, Sink] | None = None,
              wall: Callable[[], float] = time.time, job_of: JobOf | None = None,
              job_clear: JobClear | None = None) -> Notifier | None:
    """The daemon's notifier, or None when the config names no sink. ``job_of`` and
    ``job_clear``: the policy's view of the node's job and of the fleet (optional)."""
    if not cfg.sinks:
        return None
    return Notifier(cfg, db, clock, host, rule_info, sinks=sinks, wall=wall, job_of=job_of,
                    job_clear=job_clear)
