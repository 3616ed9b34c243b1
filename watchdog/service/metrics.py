"""The optional Prometheus endpoint (config ``metrics: {listen: 127.0.0.1:9849}``).

Every node's agent scraped by the site's Prometheus, with Alertmanager receiving the
alerts, is how a fleet of thousands of nodes runs with no central component of ours: the
fleet rules (``rules/prometheus/fleet.yml``, ``watchdog rules export --prometheus``) join
these series across nodes. The collector reads the pipeline's latest tick when scraped,
so an unscraped endpoint costs nothing per tick. Default port 9849: not
nvidia_gpu_exporter's 9835 nor dcgm-exporter's 9400. A failed bind is logged and shown by
``watchdog status``; it never stops the agent. The HTTP server
(:mod:`watchdog.service.metrics_http`) runs on one thread with a bounded number of
sockets and a deadline per connection: no number of idle connections to the port can
take the agent's file descriptors or delay its ticks. Label values from a job or a GPU go
through :func:`watchdog.escape.label`.

Conventions (Prometheus/OpenMetrics): base units in the name (``_watts``, ``_bytes``,
``_celsius``, ``_hertz``, ``_seconds``, ``_ratio`` for 0-1), counters end in ``_total``,
``_info`` series are 1. Every series carries ``node`` (the agent's ``host:``; the scrape
config sets ``honor_labels: true`` so Prometheus keeps it); per-GPU series carry ``gpu``
(index), ``uuid`` and ``job_id`` (empty where the node knows no job: Prometheus then drops
the label). Never ``job``, which is Prometheus's own target label.

Cardinality budget (``tests/test_fleet_metrics.py`` holds it): :data:`BUDGET` = 200
series for an 8-GPU node with 3 sinks, plus one ``watchdog_incident_active`` series per
GPU of each active incident (none on a healthy node). By design at most :data:`PER_GPU`
series per GPU, :data:`PER_NODE` per node (a few jobs included) and :data:`PER_SINK` per
sink (:func:`budget`: 175 for that node). docs/fleet.md lists every series.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from watchdog import reasons as R
from watchdog.errors import InputError
from watchdog.escape import label
from watchdog.incident import KIND_LIST, KINDS, Incident

if TYPE_CHECKING:
    from prometheus_client import ProcessCollector
    from prometheus_client.metrics_core import Metric

    from watchdog.pipeline.live import LivePipeline
    from watchdog.records import Sample
    from watchdog.service.jobs import JobTracker
    from watchdog.service.metrics_http import MetricsServer

log = logging.getLogger("watchdog.metrics")
DEFAULT_PORT = 9849
MIB = 1024.0 * 1024.0
#: (catalogue metric, exported name, help, scale to the base unit)
GPU_GAUGES = (
    ("utilization.gpu", "watchdog_gpu_utilization_ratio",
     "Fraction of time a kernel was running (0-1).", 0.01),
    ("gpm.sm_activity", "watchdog_gpu_sm_activity_ratio",
     "SM activity (GPM, Hopper and newer; 0-1).", 0.01),
    ("power.draw", "watchdog_gpu_power_watts", "Board power draw.", 1.0),
    ("temperature.gpu", "watchdog_gpu_temperature_celsius", "GPU temperature.", 1.0),
    ("memory.used", "watchdog_gpu_memory_used_bytes", "Framebuffer memory used.", MIB),
    ("memory.total", "watchdog_gpu_memory_total_bytes", "Framebuffer memory size.", MIB),
    ("clocks.sm", "watchdog_gpu_sm_clock_hertz", "SM clock.", 1.0e6),
    ("clocks_event_reasons.active", "watchdog_gpu_clock_event_reasons",
     "Clock-event reason bitmask as NVML reports it (0x1 idle, 0x4 power cap, 0x8 HW "
     "slowdown, 0x20/0x40 SW/HW thermal, 0x80 power brake).", 1.0),
    ("nvml.errors", "watchdog_gpu_nvml_errors",
     "NVML calls that failed or timed out in the last reading.", 1.0),
)
SLOWDOWN = R.THERMAL | R.HARDWARE  # clocks cut by temperature or hardware, not by choice
#: Kinds that say "this GPU is faulty": the fleet rules' suspects when a job hangs.
FAULT_KINDS = tuple(k.name for k in KIND_LIST if k.hardware)
#: Kinds with a per-GPU gauge of their own (watchdog_gpu_hang, ...): the fleet rules'.
GAUGED = tuple(k for k in KIND_LIST if k.gauge)
PER_GPU = 15  # GPU_GAUGES + busy ratio, slowdown, lost, hang, stall, fault
PER_NODE = 40  # info, job, source, ticks..., incidents per kind (14), process (6)
PER_SINK = 5
LEVELS_EVERY_S = 10.0  # learned idle/busy power re-read at most this often (wall s)


def budget(gpus: int, sinks: int) -> int:
    """The most series a healthy node of ``gpus`` GPUs and ``sinks`` sinks exports."""
    return PER_GPU * gpus + PER_NODE + PER_SINK * sinks


BUDGET = 200  # an 8-GPU node with 3 sinks, healthy


def parse_listen(value: str, at: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` or ``PORT`` -> (host, port); default host 127.0.0.1."""
    host, _, port = str(value).rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{at}: metrics.listen {value!r}: expected HOST:PORT, e.g. "
                         f"127.0.0.1:{DEFAULT_PORT}")
    return host, int(port)


class PipelineCollector:
    """A prometheus_client collector over a :class:`~watchdog.pipeline.live.LivePipeline`;
    ``jobs`` is the agent's :class:`~watchdog.service.jobs.JobTracker` (None: no job
    labels)."""

    def __init__(self, pipeline: LivePipeline, jobs: JobTracker | None = None) -> None:
        self.pipeline = pipeline
        self.jobs = jobs
        self._levels: dict[str, dict[str, float | None]] = {}
        self._levels_at = -float("inf")
        self._process: ProcessCollector | None = None

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from watchdog import __version__

        p = self.pipeline
        s = p.stats
        node = label(p.host or "")
        with p._lock:  # a consistent view: not in the middle of a tick
            samples = list(p.last_samples)
            incidents = [] if p.detector is None else [
                i for i in p.detector.incidents if i.resolved_at is None and i.fired_at]
            own = list(p.own.active.values())
            if p.detector is not None and time.monotonic() - self._levels_at >= \
                    LEVELS_EVERY_S:
                self._levels_at = time.monotonic()
                try:
                    self._levels = p.detector.learned_levels()
                except Exception as e:  # noqa: BLE001 - a scrape must always answer
                    log.warning("learned power levels not readable: %s", e)
        info = GaugeMetricFamily("watchdog_build_info", "nvml-watchdog's version (1).",
                                 labels=["node", "version", "python"])
        info.add_metric([node, __version__, platform.python_version()], 1.0)
        yield info
        jobs = self.jobs.jobs() if self.jobs is not None else []
        ji = GaugeMetricFamily("watchdog_job_info", "A job this node runs (1): the config's job: "
                               "or what its GPUs' processes say (Slurm, Kubernetes).",
                               labels=["node", "job_id", "scheduler", "run", "namespace",
                                       "pod"])
        for job, _gpus in jobs:
            ji.add_metric([node, *(label(v or "") for v in (job.id, job.scheduler, job.run,
                                                             job.namespace, job.pod))], 1.0)
        yield ji
        up = GaugeMetricFamily("watchdog_source_up", "1 when the GPUs can be read.",
                               labels=["node"])
        up.add_metric([node], 1.0 if p.source is not None else 0.0)
        yield up
        counters: tuple[tuple[str, float, str], ...] = (
                ("watchdog_ticks", s.ticks, "Ticks sampled."),
                ("watchdog_missed_ticks", s.missed_ticks, "Ticks missed (the agent was late)."),
                ("watchdog_source_errors", s.source_errors, "Ticks whose reading failed."),
                ("watchdog_nvml_errors", s.nvml_errors, "NVML calls failed or timed out."),
                ("watchdog_notifications", s.notifications, "Incident transitions handled."))
        for name, value, doc in counters:
            c = CounterMetricFamily(name, doc, labels=["node"])
            c.add_metric([node], float(value))
            yield c
        for name, value, doc in (
                ("watchdog_detect_seconds", s.last_detect_ms / 1000.0,
                 "Rule evaluation time of the last tick."),
                ("watchdog_tick_lag_seconds", s.last_lag_s, "How late the last tick ran."),
                ("watchdog_tick_cpu_seconds", s.last_tick_ms / 1000.0,
                 "CPU time of the last tick.")):
            g = GaugeMetricFamily(name, doc, labels=["node"])
            g.add_metric([node], value)
            yield g
        yield from self._gpus(node, samples, incidents)
        yield from self._incidents(node, incidents, own)
        yield from self._alerting(node)
        yield from self._process_metrics(node)

    def _job_label(self, uuid: str) -> str:
        job = self.jobs.gpu_job(uuid) if self.jobs is not None else None
        return label(job.id) if job is not None else ""

    def _gpus(self, node: str, samples: list[Sample], incidents: list[Incident]
              ) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["node", "gpu", "uuid", "job_id"]
        keys = {smp.uuid: [node, str(smp.index), label(smp.uuid), self._job_label(smp.uuid)]
                for smp in samples}
        for metric, name, doc, scale in GPU_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for smp in samples:
                v = smp.get(metric)
                if v is not None:
                    fam.add_metric(keys[smp.uuid], v * scale)
            yield fam
        busy = GaugeMetricFamily(
            "watchdog_gpu_power_busy_ratio", "Power between the GPU's own learned idle (0) "
            "and busy (1) levels; absent until both are learned.", labels=labels)
        slow = GaugeMetricFamily("watchdog_gpu_clock_slowdown", "1 while a thermal or "
                                 "hardware slowdown reason cuts the clocks (0x8, 0x20, "
                                 "0x40, 0x80).", labels=labels)
        for smp in samples:
            w = smp.get("power.draw")
            lv = self._levels.get(smp.uuid) or {}
            idle, high = lv.get("idle_w"), lv.get("busy_w")
            if w is not None and idle is not None and high is not None and high - idle > 1.0:
                busy.add_metric(keys[smp.uuid], round((w - idle) / (high - idle), 4))
            mask = smp.get("clocks_event_reasons.active")
            if mask is not None:
                slow.add_metric(keys[smp.uuid], 1.0 if int(mask) & SLOWDOWN else 0.0)
        yield busy
        yield slow
        gauged: dict[str, set[str]] = {k.name: set() for k in GAUGED}
        fault: set[str] = set()
        for inc in incidents:
            if inc.kind in gauged:
                gauged[inc.kind].update(inc.uuids)
            elif inc.kind in FAULT_KINDS:
                fault.update(inc.uuids)
        for name, members, doc in (
                ("watchdog_gpu_lost", {smp.uuid for smp in samples if smp.lost},
                 "1 when the GPU fell off the bus / NVML reports it lost."),
                *((str(k.gauge), gauged[k.name], k.gauge_help) for k in GAUGED),
                ("watchdog_gpu_fault", fault, "1 while the GPU is in a firing incident of a "
                 f"hardware kind ({', '.join(FAULT_KINDS)}).")):
            fam = GaugeMetricFamily(name, doc, labels=labels)
            for smp in samples:
                fam.add_metric(keys[smp.uuid], 1.0 if smp.uuid in members else 0.0)
            yield fam

    def _incidents(self, node: str, incidents: list[Incident], own: list[Incident]
                   ) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        count = dict.fromkeys(KINDS, 0)
        for inc in [*incidents, *own]:
            count[inc.kind] = count.get(inc.kind, 0) + 1
        fam = GaugeMetricFamily("watchdog_incidents", "Firing incidents of each kind.",
                                labels=["node", "kind"])
        for kind, n in count.items():
            fam.add_metric([node, kind], float(n))
        yield fam
        act = GaugeMetricFamily("watchdog_incident_active", "1 per firing incident and GPU "
                                "(gpu=\"node\" for a node-wide one).",
                                labels=["node", "kind", "severity", "rule", "gpu", "job_id"])
        for inc in [*own, *incidents]:
            uuids = list(getattr(inc, "uuids", []) or [])
            for gpu, uuid in zip(inc.gpus or ["node"], uuids or [""], strict=False):
                act.add_metric([node, inc.kind, inc.severity, inc.rule, str(gpu),
                                self._job_label(uuid) if uuid else ""], 1.0)
        yield act

    def _alerting(self, node: str) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        notifier = self.pipeline.alerting
        if notifier is None or not hasattr(notifier, "status"):
            return
        try:
            st = notifier.status()
        except Exception:  # noqa: BLE001 - a scrape must always answer
            return
        labels = ["node", "sink", "type"]
        pending = GaugeMetricFamily("watchdog_notify_pending", "Notifications queued in the "
                                    "outbox.", labels=labels)
        oldest = GaugeMetricFamily("watchdog_notify_oldest_pending_seconds", "Age of the "
                                   "oldest queued notification.", labels=labels)
        sink_up = GaugeMetricFamily("watchdog_notify_sink_up", "0 while the sink keeps "
                                    "failing (retried) or refuses what it is sent, else 1.",
                                    labels=labels)
        sent = CounterMetricFamily("watchdog_notify_sent", "Notifications the sink accepted.",
                                   labels=labels)
        failed = CounterMetricFamily("watchdog_notify_undeliverable", "Notifications the "
                                     "sink refused for good (4xx, redirect).", labels=labels)
        for name, sk in sorted((st.get("sinks") or {}).items()):
            key = [node, label(name), label(sk.get("type") or "")]
            pending.add_metric(key, float(sk.get("pending") or 0))
            oldest.add_metric(key, float(sk.get("oldest_pending_s") or 0.0))
            sink_up.add_metric(key, 0.0 if sk.get("failing_since") or sk.get("refused")
                               else 1.0)
            sent.add_metric(key, float(sk.get("sent") or 0))
            failed.add_metric(key, float(sk.get("undeliverable") or 0))
        yield from (pending, oldest, sink_up, sent, failed)
        dropped = CounterMetricFamily("watchdog_notify_dropped", "Notifications a full "
                                      "outbox merged into a newer one of their group or "
                                      "dropped (never a group's newest state).",
                                      labels=["node"])
        dropped.add_metric([node], float(st.get("dropped") or 0))
        yield dropped
        firing = GaugeMetricFamily("watchdog_notify_alerts_firing", "Alerts firing in the "
                                   "notification policy.", labels=["node"])
        firing.add_metric([node], float(st.get("alerts_firing") or 0))
        yield firing

    def _process_metrics(self, node: str) -> Iterator[Metric]:
        """prometheus_client's process metrics (CPU, memory, file descriptors, start
        time), with the ``node`` label every series carries."""
        from prometheus_client import ProcessCollector
        from prometheus_client.metrics_core import Metric

        if self._process is None:
            self._process = ProcessCollector(registry=None)
        for fam in self._process.collect():
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            for smp in fam.samples:
                out.add_sample(smp.name, {**smp.labels, "node": node}, smp.value)
            yield out


class Collects(Protocol):
    """More metrics for the endpoint (the Slurm actor's counters)."""

    def collect(self) -> Iterable[Metric]: ...


def serve(pipeline: LivePipeline, host: str, port: int, quiet: bool = False,
          jobs: JobTracker | None = None, extra: Sequence[Collects] = ()
          ) -> tuple[MetricsServer | None, str | None]:
    """Start the endpoint; returns ``(server or None, error or None)``; never raises.
    ``quiet``: a failure is only returned, not logged (the agent's retries). ``extra``:
    more collectors (objects with ``collect()``), e.g. the Slurm actor's counters."""
    try:
        from prometheus_client import CollectorRegistry
        from prometheus_client.registry import Collector

        from watchdog.service.metrics_http import MetricsServer

        class Registered(Collector):
            """One of ours, as prometheus_client's registry takes collectors."""

            def __init__(self, part: Collects) -> None:
                self.part = part

            def collect(self) -> Iterable[Metric]:
                return self.part.collect()

        registry = CollectorRegistry(auto_describe=False)
        for part in (PipelineCollector(pipeline, jobs), *extra):
            registry.register(Registered(part))
        server = MetricsServer(registry, host, port).start()
    except Exception as e:  # noqa: BLE001 - a taken port is a finding, not a crash
        msg = f"metrics endpoint {host}:{port} not started: {type(e).__name__}: {e}"
        if not quiet:
            log.error(msg)
        return None, msg
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server, None
