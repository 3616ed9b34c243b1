"""The live half of the one pipeline: a source read tick by tick, the detector, the
agent's state, and the notifiers.

One :meth:`LivePipeline.tick` = read every GPU at ``clock.now()``, turn failed NVML calls
into the ``nvml.errors`` metric (so a wedged driver becomes an ``nvml_error`` incident
through the same rules as everything else), feed the detector, and hand each transition
(``firing``, ``updated`` when a node-wide incident gains or loses GPUs, ``resolved``) to
the state store and the notifiers. The scheduler (:mod:`watchdog.service.daemon`) calls
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
from dataclasses import dataclass, field
from typing import Any

from watchdog.clock import Clock
from watchdog.errors import SourceUnavailable
from watchdog.incident import Incident
from watchdog.model import Sample
from watchdog.sources.base import LiveSource

log = logging.getLogger("watchdog.agent")

Notify = Callable[[str, Incident], None]
UNAVAILABLE_RULE = "nvml_unavailable"
MEMORY_RULE = "state_memory_only"  # the agent's own incidents (kind ``agent``)
CORRUPT_RULE = "state_corrupt"
CORRUPT_NOTICE_S = 900.0  # a corrupt database moved aside stays an active incident this long
#: the node-level incidents the agent raises itself (no rule file), by rule -> kind
OWN_RULES = {UNAVAILABLE_RULE: "nvml_error", MEMORY_RULE: "agent", CORRUPT_RULE: "agent"}
RETRY_FIRST_S = 5.0
RETRY_MAX_S = 300.0
FAILING_FOR_S = 30.0  # every reading failing this long = the source is gone
SAVE_EVERY_S = 60.0  # learned state to the database (and at shutdown)
STATUS_EVERY_S = 5.0  # the status row `watchdog status` reads
PRUNE_EVERY_S = 86_400.0


@dataclass
class TickStats:
    """Counters the agent keeps for ``watchdog status`` and the metrics endpoint.

    Times in seconds of the injected clock; ``*_ms`` are CPU or wall milliseconds of the
    agent's own work (not clock time)."""

    ticks: int = 0
    samples: int = 0
    source_errors: int = 0
    notifications: int = 0
    missed_ticks: int = 0
    nvml_errors: int = 0
    last_sample_at: float | None = None
    last_lag_s: float = 0.0
    max_lag_s: float = 0.0
    last_tick_ms: float = 0.0
    last_detect_ms: float = 0.0
    max_detect_ms: float = 0.0
    errors_by_gpu: dict[str, int] = field(default_factory=dict)


class LivePipeline:
    """Source -> detector -> store and notifiers, one tick at a time (ticks never overlap).

    ``open_source(now)`` returns a :class:`LiveSource` or raises ``SourceUnavailable``;
    ``make_detector(source)`` builds the detector for its GPUs. ``store`` (an
    :class:`~watchdog.state.agent.AgentStore` or None) keeps learned state, incidents
    and status. ``notifiers`` are called with ``(transition, incident)``; ``notifier``
    (optional) is an alerting facade with ``observe(transitions)`` and ``tick(now)``.
    ``anomaly`` (optional) is called each tick as ``anomaly(now, samples, engaged)``
    (``engaged``: UUIDs where a rule is pending or firing) and returns anomaly
    transitions, merged into the tick's (:mod:`watchdog.anomaly.auto`).
    """

    def __init__(self, open_source: Callable[[float], LiveSource],
                 make_detector: Callable[[LiveSource], Any], clock: Clock, *,
                 spec: str, interval: float, store: Any = None,
                 notifiers: Sequence[Notify] = (), notifier: Any = None,
                 recorder: Any = None, host: str | None = None, anomaly: Any = None) -> None:
        self._open_source = open_source
        self._make_detector = make_detector
        self.clock = clock
        self.spec = spec
        self.interval = interval
        self.store = store
        self.notifiers = list(notifiers)
        self.notifier = notifier
        self.recorder = recorder
        self.anomaly = anomaly
        self.host = host
        self.stats = TickStats()
        self.source: LiveSource | None = None
        self.detector: Any = None
        self.source_error: str | None = None
        self.started_at = clock.now()
        self.last_samples: list[Sample] = []
        self.extra_status: dict[str, Any] = {}  # e.g. the metrics endpoint's state
        self._lock = threading.Lock()
        self._down: Incident | None = None  # the node-level "cannot read NVML" incident
        self._agent: dict[str, Incident] = {}  # the agent's own incidents, by rule
        self._retry_at = -math.inf
        self._retry_s = RETRY_FIRST_S
        self._failing_since: float | None = None
        self._record_error: str | None = None
        self._alerting_error: str | None = None
        self._runtime_file = False
        self._state_error: str | None = None
        self._prev_tick: float | None = None
        # id(incident) -> (the incident, its key in the store); holding the incident keeps
        # its id from being reused by a new one while the entry exists
        self._keys: dict[int, tuple[Incident, str]] = {}
        self._members: dict[int, tuple[str, ...]] = {}
        self._saved_at = -math.inf
        self._status_at = -math.inf
        self._pruned_at = -math.inf
        if store is not None:
            n = store.close_open_incidents(clock.now(), "agent restarted")
            if n:
                log.info("%d incident(s) left active by the previous run marked resolved; "
                         "raised again if the condition persists", n)

    # --- the tick ------------------------------------------------------------------------
    def tick(self) -> list[tuple[str, Incident]]:
        """Sample once at ``clock.now()``, detect, record, notify; returns the transitions.

        Ticks never overlap: a call made while one runs waits for it."""
        with self._lock:
            cpu0 = time.process_time()
            out = self._tick(self.clock.now())
            self.stats.last_tick_ms = (time.process_time() - cpu0) * 1000.0
            return out

    def _tick(self, now: float) -> list[tuple[str, Incident]]:
        self._note_timing(now)
        changes: list[tuple[str, Incident]] = []
        if self.source is None and not self._try_open(now, changes):
            self._deliver(now, changes)
            return changes
        assert self.source is not None
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
        if self.anomaly is not None:
            try:
                changes.extend(self.anomaly(now, samples, self.detector.engaged_gpus()))
            except Exception as e:  # noqa: BLE001 - the model must not stop the rules
                log.error("anomaly model failed: %s: %s", type(e).__name__, e)
        ms = (time.perf_counter() - t0) * 1000.0
        self.stats.last_detect_ms = ms
        self.stats.max_detect_ms = max(self.stats.max_detect_ms, ms)
        self._deliver(now, changes)
        return changes

    def _record(self, now: float, samples: list[Sample]) -> None:
        """Continuous recording; a full disk pauses it (logged once), never detection."""
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

    def _note_timing(self, now: float) -> None:
        prev, self._prev_tick = self._prev_tick, now
        if prev is None:
            return
        lag = max(0.0, now - prev - self.interval)
        self.stats.last_lag_s = lag
        self.stats.max_lag_s = max(self.stats.max_lag_s, lag)
        missed = int((now - prev) / self.interval + 0.5) - 1
        if missed > 0:
            self.stats.missed_ticks += missed

    def _count_errors(self, samples: list[Sample]) -> None:
        """``Sample.errors`` -> the ``nvml.errors`` metric (0 on a clean reading)."""
        for s in samples:
            n = len(s.errors)
            if not s.lost:
                s.values["nvml.errors"] = float(n)
            if n:
                self.stats.nvml_errors += n
                self.stats.errors_by_gpu[s.uuid] = self.stats.errors_by_gpu.get(s.uuid, 0) + n

    def _updates(self, changes: list[tuple[str, Incident]]) -> None:
        """Add ``updated`` for active incidents whose GPUs changed since the last tick."""
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
    def _try_open(self, now: float, changes: list[tuple[str, Incident]]) -> bool:
        if now < self._retry_at:
            return False
        try:
            source = self._open_source(now)
        except SourceUnavailable as e:
            self._retry_at = now + self._retry_s
            log.error("%s (retrying in %.0f s)", e, self._retry_s)
            self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)
            self._raise_down(now, getattr(e, "cause", str(e)), changes,
                             remedy=getattr(e, "remedy", None))
            return False
        self.source = source
        self.source_error = None
        self.host = self.host or source.host
        self._retry_s = RETRY_FIRST_S
        self.detector = self._make_detector(source)
        self._load_learned()
        if self._down is not None:
            self._down.resolved_at = now
            changes.append(("resolved", self._down))
            log.info("%s opened: watching %d GPUs again", self.spec, len(source.devices()))
            self._down = None
        return True

    def _raise_down(self, now: float, why: str, changes: list[tuple[str, Incident]],
                    remedy: str | None = None) -> None:
        self.source_error = why
        if self._down is not None:
            return
        self._down = Incident(
            kind="nvml_error", severity="critical", host=self.host or "localhost",
            gpus=[], uuids=[], started_at=now, fired_at=now, resolved_at=None,
            rule=UNAVAILABLE_RULE,
            summary=f"cannot read the GPUs on this node: {why}. No GPU here is being "
                    "watched; "
                    f"{remedy or 'check the driver (nvidia-smi, dmesg | grep -i nvrm)'}",
            evidence={"error": why})
        changes.append(("firing", self._down))

    def _source_lost(self, now: float, why: str, changes: list[tuple[str, Incident]]) -> None:
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
        self._raise_down(now, why, changes)

    # --- notifications, state ------------------------------------------------------------
    def _deliver(self, now: float, changes: list[tuple[str, Incident]]) -> None:
        self._storage_events(now, changes)
        for what, inc in changes:
            self._store_incident(now, inc)
            for notify in self.notifiers:
                try:
                    notify(what, inc)
                except Exception as e:  # noqa: BLE001 - one broken notifier must not stop others
                    log.error("notifier %r failed: %s: %s", notify, type(e).__name__, e)
            self.stats.notifications += 1
            if what == "resolved":
                self._members.pop(id(inc), None)
        if self.notifier is not None:
            try:
                if changes:
                    self.notifier.observe(changes)
                self.notifier.tick(now)
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
        self._housekeeping(now)

    def _storage_events(self, now: float, changes: list[tuple[str, Incident]]) -> None:
        """The state database's troubles as ``agent`` incidents: one page when the state
        goes to memory (resolved when it is on disk again), one when a corrupt file was
        moved aside (resolved after ``CORRUPT_NOTICE_S``)."""
        if self.store is None:
            return
        db = self.store.db
        db.try_disk()  # at most every RESTORE_EVERY_S while in memory; free on disk
        for kind, text in db.take_events():
            if kind == "memory":
                self._raise_agent(now, MEMORY_RULE, "warning", changes, text,
                                  f"nvml-watchdog keeps its state in MEMORY ONLY: {text}. "
                                  "Detection and alerting go on; incidents, silences and "
                                  "learned levels since then are lost if the agent restarts "
                                  f"before {db.dir} can be written again (free space, fix its "
                                  "permissions or mount)")
            elif kind == "disk":
                self._resolve_agent(now, MEMORY_RULE, changes, "state written to disk again")
            elif kind == "corrupt":
                self._resolve_agent(now, CORRUPT_RULE, changes, "superseded")
                self._raise_agent(now, CORRUPT_RULE, "warning", changes, text,
                                  f"nvml-watchdog's state database was damaged: {text}. A "
                                  "fresh one is in use with what could be read; learned waits "
                                  "and levels that were lost are learned again")
        old = self._agent.get(CORRUPT_RULE)
        if old is not None and now - old.started_at >= CORRUPT_NOTICE_S:
            self._resolve_agent(now, CORRUPT_RULE, changes, "notice period over")

    def _raise_agent(self, now: float, rule: str, severity: str,
                     changes: list[tuple[str, Incident]], error: str, summary: str) -> None:
        if rule in self._agent:
            return
        inc = Incident(kind="agent", severity=severity, host=self.host or "localhost",
                       gpus=[], uuids=[], started_at=now, fired_at=now, resolved_at=None,
                       rule=rule, summary=summary, evidence={"error": error})
        self._agent[rule] = inc
        changes.append(("firing", inc))

    def _resolve_agent(self, now: float, rule: str, changes: list[tuple[str, Incident]],
                       why: str) -> None:
        inc = self._agent.pop(rule, None)
        if inc is None:
            return
        inc.resolved_at = now
        inc.evidence["resolved_by"] = why
        changes.append(("resolved", inc))

    def _store_incident(self, now: float, inc: Incident) -> None:
        entry = self._keys.get(id(inc))
        if entry is not None and entry[0] is inc:
            key = entry[1]
        else:
            who = inc.uuids[0] if inc.uuids else "node"
            key = f"{inc.rule}/{who}/{round(inc.started_at * 1000)}"
            self._keys[id(inc)] = (inc, key)
        if inc.resolved_at is not None:
            self._keys.pop(id(inc), None)
        if self.store is None:
            return
        try:
            self.store.record_incident(key, inc, now)
        except Exception as e:  # noqa: BLE001 - a broken database must not stop detection
            self._state_failed(f"cannot record incident {key}", e)

    def _housekeeping(self, now: float) -> None:
        if self.store is None:
            return
        try:
            if now - self._saved_at >= SAVE_EVERY_S:
                self.save()
            if now - self._status_at >= STATUS_EVERY_S:
                self._status_at = now
                doc = self.status()
                self.store.write_status(doc, now)
                self._runtime_status(doc, now)
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._pruned_at = now
                n = self.store.prune(now)
                if n:
                    log.info("pruned %d old row(s) from the state database", n)
        except Exception as e:  # noqa: BLE001 - a broken database must not stop detection
            self._state_failed("cannot write agent state", e)
        else:
            self._state_error = None

    def _runtime_status(self, doc: dict[str, Any], now: float) -> None:
        """While the state is in memory only, ``watchdog status`` reads the status from a
        file in memory (:mod:`watchdog.state.runtime`); it goes once the state is back."""
        from watchdog.state import runtime

        db = self.store.db
        try:
            if db.mode == "memory":
                runtime.write(db.dir, {**doc, "status_written_at": now})
                self._runtime_file = True
            elif self._runtime_file:
                runtime.remove(db.dir)
                self._runtime_file = False
        except OSError as e:
            self._state_failed("cannot write the in-memory status file", e)

    def _state_failed(self, what: str, e: BaseException) -> None:
        """Log a state-database failure once (the same error every tick is one line)."""
        text = f"{type(e).__name__}: {e}"
        if text != self._state_error:
            log.error("%s: %s (detection and alerting go on)", what, text)
        self._state_error = text

    def _load_learned(self) -> None:
        if self.store is None or self.detector is None:
            return
        waits, levels = self.store.load_learned(self.host)
        self.detector.load_learned_state(waits)
        self.detector.load_learned_levels(levels)
        if waits:
            log.info("learned waits restored: %s", ", ".join(
                f"{rule} {w.get('longest_s') or 0:.0f} s" for rule, w in sorted(waits.items())))

    def save(self) -> None:
        """Write the learned waits and levels to the store (every minute and at shutdown)."""
        now = self.clock.now()
        self._saved_at = now
        if self.store is None or self.detector is None:
            return
        self.store.save_learned(self.host, self.detector.learned_state(),
                                self.detector.learned_levels(), now)

    def replace_detector(self, make_detector: Callable[[LiveSource], Any]) -> None:
        """New rules (SIGHUP): a new detector with the learned state carried over.
        Incidents active in the old one resolve now; they are raised again by the new
        rules if the condition persists (alerting's flap guard keeps that to one page)."""
        with self._lock:
            self._make_detector = make_detector
            if self.source is None or self.detector is None:
                return
            self.save()  # evaluates ticks the detector still buffers (tick_batch_s)
            now = self.clock.now()
            changes: list[tuple[str, Incident]] = list(self.detector.drain())
            for inc in self.detector.incidents:
                if inc.resolved_at is None:
                    inc.resolved_at = now
                    inc.evidence["resolved_by"] = "rules reloaded"
                    changes.append(("resolved", inc))
            self.detector = make_detector(self.source)
            self._load_learned()
            self._deliver(now, changes)

    def status(self) -> dict[str, Any]:
        """The status document ``watchdog status`` prints (JSON-ready)."""
        from watchdog import __version__

        s = self.stats
        devices = self.source.devices() if self.source is not None else []
        waits = self.detector.learned_state() if self.detector is not None else {}
        active = [] if self.detector is None else [
            {"kind": i.kind, "severity": i.severity, "gpus": i.gpus, "rule": i.rule,
             "started_at": i.started_at, "fired_at": i.fired_at, "summary": i.summary}
            for i in self.detector.incidents if i.resolved_at is None and i.fired_at]
        for d in [self._down, *self._agent.values()]:
            if d is not None:
                active.insert(0, {"kind": d.kind, "severity": d.severity, "gpus": [],
                                  "rule": d.rule, "started_at": d.started_at,
                                  "fired_at": d.fired_at, "summary": d.summary})
        doc: dict[str, Any] = {
            "version": __version__, "host": self.host, "source": self.spec,
            "source_state": "ok" if self.source is not None else "unavailable",
            "source_error": self.source_error, "interval_s": self.interval,
            "started_at": self.started_at, "now": self.clock.now(),
            "gpus": [{"index": d.index, "uuid": d.uuid, "name": d.name} for d in devices],
            "ticks": s.ticks, "samples": s.samples, "missed_ticks": s.missed_ticks,
            "source_errors": s.source_errors, "last_sample_at": s.last_sample_at,
            "lag_s": {"last": s.last_lag_s, "max": s.max_lag_s},
            "nvml_errors": {"total": s.nvml_errors, "by_gpu": dict(s.errors_by_gpu)},
            "tick_cpu_ms": s.last_tick_ms,
            "detect_ms": {"last": s.last_detect_ms, "max": s.max_detect_ms},
            "notifications": s.notifications, "active_incidents": active,
            "learned_waits": waits, **self.extra_status,
        }
        if self.store is not None:
            doc["state_db"] = self.store.db.status()
        offset = getattr(self.clock, "offset", None)
        if offset is not None:
            doc["clock_offset_s"] = round(offset(), 3)
        if self.anomaly is not None and hasattr(self.anomaly, "status"):
            doc["model"] = self.anomaly.status()
        if self.notifier is not None and hasattr(self.notifier, "status"):
            try:
                doc["alerting"] = self.notifier.status()
            except Exception as e:  # noqa: BLE001 - status must always answer
                doc["alerting"] = {"error": str(e)}
        return doc

    def close(self, drain_s: float = 5.0) -> None:
        """Save what was learned, write a final status, drain alerts, close the source."""
        with self._lock:
            now = self.clock.now()
            if self.store is not None and self.store.db.mode == "memory":
                # one last try to put the state on disk, and say so if it worked
                changes: list[tuple[str, Incident]] = []
                self.store.db.try_disk(force=True)
                self._storage_events(now, changes)
                if changes and self.notifier is not None:
                    try:
                        self.notifier.observe(changes)
                        self.notifier.tick(now)
                    except Exception as e:  # noqa: BLE001 - shutdown goes on
                        log.error("alerting at shutdown: %s", e)
                for _, inc in changes:
                    self._store_incident(now, inc)
            try:
                self.save()
                if self.store is not None:
                    doc = self.status()
                    doc["stopped_at"] = self.clock.now()
                    self.store.write_status(doc, self.clock.now())
                    self._runtime_status(doc, self.clock.now())
            except Exception as e:  # noqa: BLE001 - shutdown goes on
                log.error("cannot save agent state at shutdown: %s", e)
            if self.notifier is not None:
                try:
                    self.notifier.drain(drain_s)
                    self.notifier.close()
                except Exception as e:  # noqa: BLE001
                    log.error("alerting shutdown: %s", e)
            if self.recorder is not None:
                self.recorder.close()
            if self.source is not None:
                self.source.close()
