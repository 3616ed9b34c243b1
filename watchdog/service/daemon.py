"""The daemon's main loop: ticks on the monotonic clock, signals, systemd notification,
heartbeat.

* Ticks run on their own thread (:class:`Ticker`) every ``interval`` of the kernel's
  monotonic boot-time clock (:func:`watchdog.clock.elapsed`): a wall-clock step (NTP, an
  admin, a VM restored) never delays or hurries sampling. A late tick runs once, not once
  per missed slot (the pipeline counts the missed ones). The first tick runs before the
  ticker starts, so READY=1 means "sampling works". (APScheduler, used before, schedules on
  the wall clock: a clock stepped back an hour stopped sampling for good.)
* SIGTERM / SIGINT: stop scheduling, let the running tick end, save the learned state,
  drain the alert outbox for a bounded time, exit 0.
* SIGHUP: reload the config file and the rules. A bad new config or rule is logged with
  its file:line and the running one stays; so does a config whose reading fails in any
  other way (a RecursionError, a MemoryError under the unit's MemoryMax, a bug): nothing
  a config or rule file holds can end the agent.
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
from types import FrameType

from watchdog.clock import elapsed
from watchdog.pipeline.live import LivePipeline
from watchdog.pipeline.settings import Settings
from watchdog.service.sdnotify import SystemdNotifier
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.agent")
HEARTBEAT_S = 300.0  # real seconds between heartbeat log lines
STATUS_EVERY_S = 10.0  # real seconds between STATUS= updates (and upkeep: metrics retry)


class Ticker(threading.Thread):
    """Calls ``job()`` at ``start + k * period`` on the monotonic clock until stopped.

    A job that overruns its slot is followed by the next free slot (coalesced, as a
    scheduler with ``coalesce`` would). :meth:`set_period` takes effect at the next tick.
    """

    def __init__(self, job: Callable[[], None], period: float) -> None:
        super().__init__(name="tick", daemon=True)
        self.job = job
        self.period = period
        self._stop_event = threading.Event()
        self._changed = threading.Event()

    def set_period(self, period: float) -> None:
        self.period = period
        self._changed.set()

    def stop(self) -> None:
        self._stop_event.set()
        self._changed.set()

    def run(self) -> None:
        due = elapsed() + self.period
        while not self._stop_event.is_set():
            wait = due - elapsed()
            if wait > 0:
                self._changed.wait(wait)
                if self._changed.is_set():
                    self._changed.clear()
                    if self._stop_event.is_set():
                        return
                    due = elapsed() + self.period  # a new period counts from now
                    continue
            self.job()
            now = elapsed()
            due += self.period
            if due <= now:  # overran: skip to the next free slot
                due = now + self.period - ((now - due) % self.period)


class Daemon:
    """Runs ``pipeline.tick`` every ``interval`` clock-seconds until stopped.

    ``settings`` (the pipeline's, :class:`~watchdog.pipeline.settings.Settings`) own the
    interval when given: a reload that changes it reaches the ticker. ``reload()``
    (SIGHUP) is a callable returning a one-line description of what changed; it raises
    ``WatchdogError`` for a bad config, which is logged and ignored. ``maintain()`` runs on
    the main loop every ``STATUS_EVERY_S``; ``on_ready()`` once the first tick is done.
    """

    def __init__(self, pipeline: LivePipeline, *, interval: float,
                 settings: Settings | None = None, speed: float = 1.0,
                 stop_at: float | None = None,
                 reload: Callable[[], str] | None = None,
                 sd: SystemdNotifier | None = None,
                 maintain: Callable[[], None] | None = None,
                 on_ready: Callable[[], None] | None = None) -> None:
        self.pipeline = pipeline
        self._interval = interval
        self.speed = speed
        self.stop_at = stop_at
        self._reload = reload
        self._maintain = maintain  # called from the main loop every STATUS_EVERY_S
        self.sd = sd or SystemdNotifier()
        self.done = threading.Event()
        self._hup = threading.Event()
        # wakes the main loop for a signal or a stop; otherwise it sleeps until its next
        # deadline (ping, STATUS=, heartbeat), not in short slices: an idle agent costs
        # no CPU between ticks
        self._wake = threading.Event()
        self._last_tick_end = time.monotonic()
        self._tick_started: float | None = None
        self._ticker: Ticker | None = None
        self.settings = settings
        if settings is not None:  # one owner of the interval: a reload reaches the ticker
            settings.subscribe(self._settings_changed)
        self.reload_state: JsonDoc | None = None  # the last SIGHUP: at, ok, message
        self.on_ready = on_ready

    @property
    def interval(self) -> float:
        """The sampling period (s of the pipeline's clock): the settings own it."""
        return self.settings.interval if self.settings is not None else self._interval

    def _settings_changed(self, settings: Settings, changed: frozenset[str]) -> None:
        if "interval" in changed and self._ticker is not None:
            self._ticker.set_period(settings.interval / self.speed)

    # --- signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads (main thread only)."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    def _on_hup(self, _signum: int, _frame: FrameType | None) -> None:
        self._hup.set()
        self._wake.set()

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
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

    def run(self) -> int:
        """Tick until stopped; returns the exit code (0)."""
        self._job()  # the first tick now: READY=1 means sampling works
        if self.on_ready is not None:
            self.on_ready()
        self.sd.ready(self._status_line())
        self._ticker = Ticker(self._job, self.interval / self.speed)
        self._ticker.start()
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
                    next_status = mono + STATUS_EVERY_S
                    if self._maintain is not None:
                        try:
                            self._maintain()
                        except Exception as e:  # noqa: BLE001 - upkeep must not stop the agent
                            log.error("maintenance failed: %s: %s", type(e).__name__, e)
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
            self._ticker.stop()
            self._ticker.join()
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

        at = self.pipeline.clock.now()
        try:
            what = self._reload()
        except WatchdogError as e:
            log.error("reload failed, keeping the running config: %s", e)
            self.reload_state = {"at": at, "ok": False, "message": str(e)}
        except Exception as e:  # noqa: BLE001 - no config may end the agent (MemoryError too)
            text = f"internal error: {type(e).__name__}: {str(e)[:200]}"
            log.error("reload failed, keeping the running config: %s", text)
            self.reload_state = {"at": at, "ok": False, "message": text}
        else:
            log.info("reloaded: %s", what)
            self.reload_state = {"at": at, "ok": True, "message": what}
        self.pipeline.extra_status["reload"] = self.reload_state
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
