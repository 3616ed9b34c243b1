"""The live half of the one pipeline: a source read tick by tick, the detector, the
agent's state, the listeners and alerting.

One :meth:`LivePipeline.tick` = read every GPU at ``clock.now()``, turn failed NVML calls
into the ``nvml.errors`` metric (so a wedged driver becomes an ``nvml_error`` incident
through the same rules as everything else), feed the detector, and hand each transition
(``firing``, ``updated`` when a node-wide incident gains or loses GPUs, ``resolved``) to
the state store, the listeners and alerting. The scheduler (:mod:`watchdog.service.daemon`) calls
it every interval; tests call it on a ManualClock.

A source that cannot be opened (no NVML library, driver not loaded) does not stop the
agent: it raises one node-level ``nvml_error`` incident and retries with backoff on the
injected clock (5 s doubling to 5 min); when the source opens, the incident resolves and
sampling starts. A source whose every reading fails for 30 s is treated the same way.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from watchdog.anomaly.handover import Handover
from watchdog.clock import Clock
from watchdog.detect import Detector
from watchdog.errors import SourceUnavailable
from watchdog.incident import Incident
from watchdog.pipeline.keeper import StateKeeper
from watchdog.pipeline.own import OwnIncidents, sinks_down
from watchdog.pipeline.ports import (
    Alerting,
    AnomalyHook,
    Listener,
    OpensOnDevices,
    SampleRecorder,
    Transition,
)
from watchdog.pipeline.settings import Settings
from watchdog.pipeline.status import TickStats, status_doc
from watchdog.records import Sample
from watchdog.sources.base import LiveSource
from watchdog.store.agent import AgentStore
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.agent")

RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
FAILING_FOR_S = 30.0  # every reading failing this long = the source is gone
GAP_INTERVALS = 3  # no tick for more than this many intervals: the agent itself was held
# The detector's engagement timeline keeps every rule episode for replay; the live hook
# asks only about the last few seconds, so episodes that ended this long before the last
# evaluated tick go (else a year's episodes are searched every tick).
ENGAGED_KEEP_S = 3600.0


class LivePipeline:
    """Source -> detector -> store, listeners and alerting, one tick at a time (ticks never
    overlap).

    Every collaborator is built before the pipeline and handed in: ``open_source(now)``
    returns a :class:`LiveSource` or raises ``SourceUnavailable``; ``make_detector(source)``
    builds the detector for its GPUs (:func:`watchdog.pipeline.core.build_detector`);
    ``settings`` owns the interval and the rules (:mod:`watchdog.pipeline.settings`; a
    plain ``interval`` makes one). ``store`` (or None) keeps learned state, incidents and
    status. ``listeners`` are called with every ``(transition, incident)``; ``alerting``
    is the :class:`Alerting` facade; ``anomaly`` the :class:`AnomalyHook`; ``recorder``
    the :class:`SampleRecorder`; ``extra_status``: parts of ``watchdog status`` the agent's
    other parts keep up to date (the metrics endpoint's, the job tracker's).
    """

    def __init__(self, open_source: Callable[[float], LiveSource],
                 make_detector: Callable[[LiveSource], Detector], clock: Clock, *,
                 spec: str, interval: float | None = None, settings: Settings | None = None,
                 store: AgentStore | None = None, listeners: Sequence[Listener] = (),
                 alerting: Alerting | None = None, recorder: SampleRecorder | None = None,
                 host: str | None = None, anomaly: AnomalyHook | None = None,
                 watch_gaps: bool = False, extra_status: JsonDoc | None = None) -> None:
        if settings is None:
            if interval is None:
                raise ValueError("LivePipeline needs settings or an interval")
            settings = Settings(interval)
        self._open_source = open_source
        self._make_detector = make_detector
        self.clock = clock
        self.spec = spec
        self.settings = settings
        self.store = store
        self.keeper = StateKeeper(store)
        self.listeners = list(listeners)
        self.alerting = alerting
        self.recorder = recorder
        self.anomaly = anomaly
        self.handover = Handover()  # one page per problem: a rule takes an anomaly over
        self.host = host
        self.stats = TickStats()
        self.source: LiveSource | None = None
        self.detector: Detector | None = None
        self.source_error: str | None = None
        self.started_at = clock.now()
        self.last_samples: list[Sample] = []
        self.extra_status = extra_status if extra_status is not None else {}
        self._lock = threading.Lock()
        self.own = OwnIncidents(lambda: self.host)  # nvml_error (no GPUs), agent (state)
        self._retry_at = -math.inf
        self._retry_s = RETRY_FIRST_S
        self._failing_since: float | None = None
        self._record_error: str | None = None
        self._alerting_error: str | None = None
        self._prev_tick: float | None = None
        # a gap in the agent's own ticks is a log line and, past a minute, an incident: on
        # for the real agent only (a simulated node at --speed, a test's manual clock, jump)
        self.watch_gaps = watch_gaps
        self._members: dict[int, tuple[str, ...]] = {}
        self._forgot_at = -math.inf
        if store is not None:
            n = store.close_open_incidents(clock.now(), "agent restarted")
            if n:
                log.info("%d incident(s) left active by the previous run marked resolved; "
                         "raised again if the condition persists", n)

    # --- the tick ------------------------------------------------------------------------
    def tick(self) -> list[Transition]:
        """Sample once at ``clock.now()``, detect, record, notify; returns the transitions.

        Ticks never overlap: a call made while one runs waits for it."""
        with self._lock:
            cpu0 = time.process_time()
            out = self._tick(self.clock.now())
            self.stats.last_tick_ms = (time.process_time() - cpu0) * 1000.0
            return out

    def _tick(self, now: float) -> list[Transition]:
        changes: list[Transition] = []
        self._note_timing(now, changes)
        if self.source is None and not self._try_open(now, changes):
            self._deliver(now, changes)
            return changes
        assert self.source is not None and self.detector is not None
        try:
            samples = self.source.sample(now)
        except Exception as e:  # noqa: BLE001 - a bad tick must not kill the daemon
            self.stats.source_errors += 1
            log.error("sampling failed: %s: %s", type(e).__name__, e)
            if self._failing_since is None:
                self._failing_since = now
            if now - self._failing_since >= FAILING_FOR_S:
                self._source_lost(now, f"every reading failed for {now - self._failing_since:.0f}"
                                  f" s: {type(e).__name__}: {e}", changes)
            self._deliver(now, changes)
            return changes
        self._failing_since = None
        self._count_errors(samples)
        self.stats.ticks += 1
        self.stats.samples += len(samples)
        self.stats.last_sample_at = now
        self.last_samples = samples
        if self.recorder is not None:
            self._record(now, samples)
        t0 = time.perf_counter()
        self.detector.feed_tick(now, samples)
        changes.extend(self.detector.drain())
        self._updates(changes)
        if now - self._forgot_at >= ENGAGED_KEEP_S:
            self._forgot_at = now
            engaged = self.detector.engaged
            engaged.forget_before(engaged.until - ENGAGED_KEEP_S)
        if self.anomaly is not None:
            try:
                changes.extend(self.anomaly(now, samples, self.detector.engaged))
            except Exception as e:  # noqa: BLE001 - the model must not stop the rules
                log.error("anomaly model failed: %s: %s", type(e).__name__, e)
            changes = self.handover(changes)
        ms = (time.perf_counter() - t0) * 1000.0
        self.stats.last_detect_ms = ms
        self.stats.max_detect_ms = max(self.stats.max_detect_ms, ms)
        self._deliver(now, changes)
        return changes

    def _record(self, now: float, samples: list[Sample]) -> None:
        """Continuous recording; a full disk pauses it (logged once), never detection."""
        assert self.recorder is not None
        try:
            self.recorder.write(now, samples)
        except Exception as e:  # noqa: BLE001 - a recording problem must not stop detection
            text = f"{type(e).__name__}: {e}"
            if text != self._record_error:
                log.error("recording failed (detection goes on; retried every tick): %s", text)
            self._record_error = text
        else:
            if self._record_error is not None:
                log.warning("recording works again")
            self._record_error = None

    @property
    def interval(self) -> float:
        """The sampling period (s of the clock), owned by :attr:`settings`."""
        return self.settings.interval

    def _note_timing(self, now: float, changes: list[Transition]) -> None:
        prev, self._prev_tick = self._prev_tick, now
        if self.watch_gaps:
            self.own.notices(now, changes)
        if prev is None:
            return
        lag = max(0.0, now - prev - self.interval)
        self.stats.last_lag_s = lag
        self.stats.max_lag_s = max(self.stats.max_lag_s, lag)
        missed = int((now - prev) / self.interval + 0.5) - 1
        if missed > 0:
            self.stats.missed_ticks += missed
        if self.watch_gaps and now - prev > GAP_INTERVALS * self.interval:
            self.own.gap(now, prev, self.interval, changes)

    def _count_errors(self, samples: list[Sample]) -> None:
        """``Sample.errors`` -> the ``nvml.errors`` metric (0 on a clean reading)."""
        for s in samples:
            n = len(s.errors)
            if not s.lost:
                s.values["nvml.errors"] = float(n)
            if n:
                self.stats.nvml_errors += n
                self.stats.errors_by_gpu[s.uuid] = self.stats.errors_by_gpu.get(s.uuid, 0) + n

    def _updates(self, changes: list[Transition]) -> None:
        """Add ``updated`` for active incidents whose GPUs changed since the last tick."""
        assert self.detector is not None
        seen = {id(inc) for _, inc in changes}
        for inc in self.detector.incidents:
            if inc.resolved_at is not None or inc.fired_at is None:
                continue
            key = id(inc)
            now_members = tuple(inc.uuids)
            before = self._members.get(key)
            if before is not None and before != now_members and key not in seen:
                changes.append(("updated", inc))
            self._members[key] = now_members

    # --- the source coming and going -------------------------------------------------------
    def _try_open(self, now: float, changes: list[Transition]) -> bool:
        if now < self._retry_at:
            return False
        try:
            source = self._open_source(now)
        except SourceUnavailable as e:
            self._retry_at = now + self._retry_s
            log.error("%s (retrying in %.0f s)", e, self._retry_s)
            self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
            self.source_error = getattr(e, "cause", str(e))
            self.own.source_down(now, self.source_error, changes,
                                 remedy=getattr(e, "remedy", None))
            return False
        self.source = source
        self.source_error = None
        self.host = self.host or source.host
        for part in (self.recorder, self.anomaly):
            if isinstance(part, OpensOnDevices):
                part.open(self.host, source.devices())
        self._retry_s = RETRY_FIRST_S
        self.detector = self._make_detector(source)
        self.keeper.restore(self.detector, self.host)
        if self.own.source_up(now, changes):
            log.info("%s opened: watching %d GPUs again", self.spec, len(source.devices()))
        return True

    def _source_lost(self, now: float, why: str, changes: list[Transition]) -> None:
        """Every reading failing: close the source and go back to retrying to open it."""
        self.save()
        try:
            if self.source is not None:
                self.source.close()
        except Exception as e:  # noqa: BLE001 - closing a broken source may fail too
            log.warning("closing the failed source: %s", e)
        self.source = None
        self._failing_since = None
        self._retry_at = now + self._retry_s
        self.source_error = why
        self.own.source_down(now, why, changes)

    # --- notifications, state ------------------------------------------------------------
    def _deliver(self, now: float, changes: list[Transition]) -> None:
        if self.store is not None:
            self.own.storage(now, self.store.db, changes)
        if self.alerting is not None:
            sinks_down(self.own, now, self.alerting.down(), changes)
        for what, inc in changes:
            self.keeper.record(now, inc)
            for listen in self.listeners:
                try:
                    listen(what, inc)
                except Exception as e:  # noqa: BLE001 - one broken listener must not stop others
                    log.error("listener %r failed: %s: %s", listen, type(e).__name__, e)
            self.stats.notifications += 1
            if what == "resolved":
                self._members.pop(id(inc), None)
        if self.alerting is not None:
            try:
                if changes:
                    self.alerting.observe(changes)
                self.alerting.tick(now)
            except Exception as e:  # noqa: BLE001 - alerting trouble must not stop sampling
                text = f"{type(e).__name__}: {e}"
                if text != self._alerting_error:
                    log.error("alerting failed: %s (retried every tick; logged once)", text)
                self._alerting_error = text
            else:
                if self._alerting_error is not None:
                    log.warning("alerting works again")
                self._alerting_error = None
        if self.detector is not None and any(w == "resolved" for w, _ in changes):
            self.detector.forget_resolved()
        self.keeper.upkeep(now, self.detector, self.host, self.status,
                           self.settings.retention_s)

    def save(self) -> None:
        """Write the learned waits and levels to the store (every minute and at shutdown)."""
        self.keeper.save(self.clock.now(), self.detector, self.host)

    def replace_detector(self, make_detector: Callable[[LiveSource], Detector] | None = None
                         ) -> None:
        """New rules (SIGHUP): a new detector (from ``make_detector``, else the factory the
        pipeline has, which reads the rules in force) with the learned state carried over.
        Incidents active in the old one resolve now; they are raised again by the new
        rules if the condition persists (alerting's flap guard keeps that to one page)."""
        with self._lock:
            if make_detector is not None:
                self._make_detector = make_detector
            make_detector = self._make_detector
            if self.source is None or self.detector is None:
                return
            self.save()  # evaluates ticks the detector still buffers (tick_batch_s)
            now = self.clock.now()
            changes: list[Transition] = list(self.detector.drain())
            for inc in self.detector.incidents:
                if inc.resolved_at is None:
                    inc.resolved_at = now
                    inc.evidence["resolved_by"] = "rules reloaded"
                    changes.append(("resolved", inc))
            self.detector = make_detector(self.source)
            self.keeper.restore(self.detector, self.host)
            self._deliver(now, changes)

    def annotate(self, inc: Incident, key: str, text: str) -> None:
        """Add ``text`` to an active incident's ``evidence[key]`` (a list) and record it
        again: what was done about it (a Slurm drain), from another thread."""
        with self._lock:
            if inc.resolved_at is not None:
                return
            inc.evidence[key] = [*inc.evidence.get(key, []), text][-10:]
            self.keeper.record(self.clock.now(), inc)

    def status(self) -> JsonDoc:
        """The status document ``watchdog status`` prints (JSON-ready)."""
        return status_doc(self)

    def close(self, drain_s: float = 5.0) -> None:
        """Save what was learned, write a final status, drain alerts, close the source."""
        with self._lock:
            now = self.clock.now()
            if self.store is not None and self.store.db.mode == "memory":
                # one last try to put the state on disk, and say so if it worked
                changes: list[Transition] = []
                self.store.db.try_disk(force=True)
                self.own.storage(now, self.store.db, changes)
                if changes and self.alerting is not None:
                    try:
                        self.alerting.observe(changes)
                        self.alerting.tick(now)
                    except Exception as e:  # noqa: BLE001 - shutdown goes on
                        log.error("alerting at shutdown: %s", e)
                for _, inc in changes:
                    self.keeper.record(now, inc)
            try:
                self.save()
                if self.store is not None:
                    doc = self.status()
                    doc["stopped_at"] = self.clock.now()
                    self.keeper.write_status(doc, self.clock.now())
            except Exception as e:  # noqa: BLE001 - shutdown goes on
                log.error("cannot save agent state at shutdown: %s", e)
            if self.alerting is not None:
                try:
                    self.alerting.drain(drain_s)
                    self.alerting.close()
                except Exception as e:  # noqa: BLE001
                    log.error("alerting shutdown: %s", e)
            if self.recorder is not None:
                self.recorder.close()
            if self.source is not None:
                self.source.close()
