"""The daemon's main loop: APScheduler ticks, signals, systemd notification, heartbeat.

* Ticks run on an APScheduler interval job (``coalesce``: a late tick is not run twice);
  the first tick runs before the scheduler starts, so READY=1 means "sampling works".
* SIGTERM / SIGINT: stop scheduling, let the running tick end, save the learned state,
  drain the alert outbox for a bounded time, exit 0.
* SIGHUP: reload the config file and the rules. A bad new config or rule is logged with
  its file:line and the running one stays.
* ``WATCHDOG=1`` pings go out only while ticks complete: a sampling thread stuck for
  longer than half of ``WatchdogSec`` stops them and systemd restarts the agent.
* A heartbeat line every ``HEARTBEAT_S`` while running.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from watchdog.service.sdnotify import Notifier

log = logging.getLogger("watchdog.agent")
HEARTBEAT_S = 300.0  # real seconds between heartbeat log lines


class Daemon:
    """Runs ``pipeline.tick`` every ``interval`` clock-seconds until stopped.

    ``reload()`` (SIGHUP) is a callable returning a one-line description of what changed;
    it raises ``WatchdogError`` for a bad config, which is logged and ignored.
    """

    def __init__(self, pipeline: Any, *, interval: float, speed: float = 1.0,
                 stop_at: float | None = None,
                 reload: Callable[[], str] | None = None,
                 sd: Notifier | None = None) -> None:
        self.pipeline = pipeline
        self.interval = interval
        self.speed = speed
        self.stop_at = stop_at
        self._reload = reload
        self.sd = sd or Notifier()
        self.done = threading.Event()
        self._hup = threading.Event()
        # wakes the main loop for a signal or a stop; otherwise it sleeps until its next
        # deadline (ping, STATUS=, heartbeat), not in short slices: an idle agent costs
        # no CPU between ticks
        self._wake = threading.Event()
        self._last_tick_end = time.monotonic()
        self._tick_started: float | None = None
        self._sched: Any = None
        self.on_ready: Callable[[], None] | None = None

    # --- signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_hup(self, _signum: int, _frame: Any) -> None:
        self._hup.set()
        self._wake.set()

    def _on_stop(self, signum: int, _frame: Any) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        self.stop()

    def stop(self) -> None:
        """End :meth:`run` (from any thread)."""
        self.done.set()
        self._wake.set()

    # --- ticks ---------------------------------------------------------------------------
    def _job(self) -> None:
        if self.done.is_set():
            return
        self._tick_started = time.monotonic()
        try:
            self.pipeline.tick()
        except Exception as e:
            log.exception("tick failed: %s: %s", type(e).__name__, e)
        finally:
            self._tick_started = None
            self._last_tick_end = time.monotonic()
        if self.stop_at is not None and self.pipeline.clock.now() >= self.stop_at:
            self.stop()

    def _schedule(self, interval: float) -> None:
        if self._sched.get_job("sample") is not None:
            self._sched.remove_job("sample")
        self._sched.add_job(self._job, "interval", seconds=interval / self.speed, id="sample")

    def run(self) -> int:
        """Tick until stopped; returns the exit code (0)."""
        from apscheduler.schedulers.background import BackgroundScheduler

        self._sched = BackgroundScheduler(job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        self._job()  # the first tick now: READY=1 means sampling works
        if self.on_ready is not None:
            self.on_ready()
        self.sd.ready(self._status_line())
        self._schedule(self.interval)
        self._sched.start()
        next_beat = time.monotonic() + HEARTBEAT_S
        next_ping = time.monotonic()
        next_status = time.monotonic()
        try:
            while not self.done.is_set():
                mono = time.monotonic()
                if self._hup.is_set():
                    self._hup.clear()
                    self._do_reload()
                if self.sd.watchdog_s is not None and mono >= next_ping:
                    if self.healthy(mono):
                        self.sd.ping()
                    else:
                        log.error("a tick has been running for %.0f s: not pinging the "
                                  "systemd watchdog", mono - (self._tick_started or mono))
                    next_ping = mono + self.sd.watchdog_s
                if mono >= next_status:
                    self.sd.status(self._status_line())
                    next_status = mono + 10.0
                if mono >= next_beat:
                    log.info("heartbeat: %s", self._status_line())
                    next_beat = mono + HEARTBEAT_S
                due = min(next_status, next_beat,
                          next_ping if self.sd.watchdog_s is not None else next_beat)
                if self.stop_at is not None:  # --duration ends between ticks too
                    left = (self.stop_at - self.pipeline.clock.now()) / self.speed
                    if left <= 0:
                        self.stop()
                        continue
                    due = min(due, mono + left)
                self._wake.wait(max(due - time.monotonic(), 0.01))
                self._wake.clear()
        finally:
            self.sd.stopping()
            self._sched.shutdown(wait=True)
        return 0

    def healthy(self, mono: float) -> bool:
        """Whether ticks are completing: the running tick (if any) started recently and the
        last one ended within a few intervals (or half the systemd watchdog period)."""
        window = max(3 * self.interval / self.speed, (self.sd.watchdog_s or 0.0))
        started = self._tick_started
        if started is not None and mono - started > window:
            return False
        return mono - self._last_tick_end <= window + self.interval / self.speed

    def _do_reload(self) -> None:
        if self._reload is None:
            log.info("SIGHUP: no config file to reload")
            return
        self.sd.reloading()
        from watchdog.errors import WatchdogError

        try:
            what = self._reload()
        except WatchdogError as e:
            log.error("reload failed, keeping the running config: %s", e)
        else:
            log.info("reloaded: %s", what)
            new_interval = getattr(self.pipeline, "interval", self.interval)
            if new_interval != self.interval:
                self.interval = new_interval
                self._schedule(new_interval)
        self.sd.send("READY=1", f"STATUS={self._status_line()}")

    def _status_line(self) -> str:
        p = self.pipeline
        s = p.stats
        doc_active = sum(1 for i in (p.detector.incidents if p.detector else [])
                         if i.resolved_at is None and i.fired_at)
        if p.source is None:
            return f"GPUs unreadable: {p.source_error} (retrying)"
        n = len(p.source.devices())
        return (f"watching {n} GPU{'s' if n != 1 else ''} on {p.host}: {s.ticks} ticks, "
                f"{s.missed_ticks} missed, {doc_active} active incident"
                f"{'s' if doc_active != 1 else ''}, detect {s.last_detect_ms:.1f} ms, "
                f"{s.nvml_errors} NVML errors")
