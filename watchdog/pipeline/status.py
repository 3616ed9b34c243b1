"""The status document of the running agent: what ``watchdog status`` prints, the
metrics endpoint serves and the daemon's STATUS= line is made from (JSON-ready; times in
seconds of the agent's clock)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from watchdog.clock import Clock
from watchdog.detect import Detector
from watchdog.pipeline.own import OwnIncidents
from watchdog.pipeline.ports import Alerting, AnomalyHook, Reports
from watchdog.sources.base import LiveSource
from watchdog.store.agent import AgentStore
from watchdog.untyped import JsonDoc


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


class PipelineView(Protocol):
    """What the status document reads of a live pipeline
    (:class:`watchdog.pipeline.live.LivePipeline`, which imports this module)."""

    stats: TickStats
    source: LiveSource | None
    detector: Detector | None
    own: OwnIncidents
    host: str | None
    spec: str
    source_error: str | None
    started_at: float
    clock: Clock
    extra_status: JsonDoc
    store: AgentStore | None
    anomaly: AnomalyHook | None
    alerting: Alerting | None

    @property
    def interval(self) -> float: ...


def status_doc(p: PipelineView) -> JsonDoc:
    """The status document of a live pipeline ``p`` (JSON-ready)."""
    from watchdog import __version__

    s = p.stats
    devices = p.source.devices() if p.source is not None else []
    waits = p.detector.learned_state() if p.detector is not None else {}
    active = [] if p.detector is None else [
        {"kind": i.kind, "severity": i.severity, "gpus": i.gpus, "rule": i.rule,
         "started_at": i.started_at, "fired_at": i.fired_at, "summary": i.summary}
        for i in p.detector.incidents if i.resolved_at is None and i.fired_at]
    for d in p.own.active.values():
        active.insert(0, {"kind": d.kind, "severity": d.severity, "gpus": [],
                          "rule": d.rule, "started_at": d.started_at,
                          "fired_at": d.fired_at, "summary": d.summary})
    doc: JsonDoc = {
        "version": __version__, "host": p.host, "source": p.spec,
        "source_state": "ok" if p.source is not None else "unavailable",
        "source_error": p.source_error, "interval_s": p.interval,
        "started_at": p.started_at, "now": p.clock.now(),
        "gpus": [{"index": d.index, "uuid": d.uuid, "name": d.name} for d in devices],
        "ticks": s.ticks, "samples": s.samples, "missed_ticks": s.missed_ticks,
        "source_errors": s.source_errors, "last_sample_at": s.last_sample_at,
        "lag_s": {"last": s.last_lag_s, "max": s.max_lag_s},
        "nvml_errors": {"total": s.nvml_errors, "by_gpu": dict(s.errors_by_gpu)},
        "tick_cpu_ms": s.last_tick_ms,
        "detect_ms": {"last": s.last_detect_ms, "max": s.max_detect_ms},
        "notifications": s.notifications, "active_incidents": active,
        "learned_waits": waits, **p.extra_status,
    }
    if p.store is not None:
        doc["state_db"] = p.store.db.status()
    offset = getattr(p.clock, "offset", None)
    if offset is not None:
        doc["clock_offset_s"] = round(offset(), 3)
    if isinstance(p.anomaly, Reports):
        doc["model"] = p.anomaly.status()
    if p.alerting is not None:
        try:
            doc["alerting"] = p.alerting.status()
        except Exception as e:  # noqa: BLE001 - status must always answer
            doc["alerting"] = {"error": str(e)}
    return doc
