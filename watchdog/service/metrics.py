"""The optional Prometheus endpoint (config ``metrics: {listen: 127.0.0.1:9849}``).

Every node's agent scraped by the site's Prometheus, with Alertmanager receiving the
alerts, is how a fleet of thousands of nodes runs with no central component of ours. The
collector reads the pipeline's latest tick when scraped, so an unscraped endpoint costs
nothing per tick. Default port 9849: not nvidia_gpu_exporter's 9835 nor dcgm-exporter's
9400. A failed bind is logged and shown by ``watchdog status``; it never stops the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from watchdog.errors import InputError

log = logging.getLogger("watchdog.metrics")
DEFAULT_PORT = 9849
GPU_GAUGES = (  # (catalogue metric, exported name, help)
    ("utilization.gpu", "gpu_utilization_percent", "Percent of time a kernel was running."),
    ("power.draw", "gpu_power_watts", "Board power draw (W)."),
    ("temperature.gpu", "gpu_temperature_celsius", "GPU temperature (C)."),
    ("memory.used", "gpu_memory_used_mib", "Framebuffer memory used (MiB)."),
    ("clocks.sm", "gpu_sm_clock_mhz", "SM clock (MHz)."),
    ("gpm.sm_activity", "gpu_sm_activity_percent", "SM activity (GPM, Hopper+)."),
    ("nvml.errors", "gpu_nvml_errors", "NVML calls that failed or timed out in the last reading."),
)


def parse_listen(value: str, at: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` or ``PORT`` -> (host, port); default host 127.0.0.1."""
    host, _, port = str(value).rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{at}: metrics.listen {value!r}: expected HOST:PORT, e.g. "
                         f"127.0.0.1:{DEFAULT_PORT}")
    return host, int(port)


class PipelineCollector:
    """A prometheus_client collector over a :class:`~watchdog.pipeline.live.LivePipeline`."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        p = self.pipeline
        s = p.stats
        host = p.host or ""
        up = GaugeMetricFamily("watchdog_source_up", "1 when the GPUs can be read.",
                               labels=["host"])
        up.add_metric([host], 1.0 if p.source is not None else 0.0)
        yield up
        for name, value, doc in (
                ("watchdog_ticks", s.ticks, "Ticks sampled."),
                ("watchdog_missed_ticks", s.missed_ticks, "Ticks missed (the agent was late)."),
                ("watchdog_source_errors", s.source_errors, "Ticks whose reading failed."),
                ("watchdog_nvml_errors", s.nvml_errors, "NVML calls failed or timed out."),
                ("watchdog_notifications", s.notifications, "Incident transitions handled.")):
            c = CounterMetricFamily(name, doc, labels=["host"])
            c.add_metric([host], float(value))
            yield c
        g = GaugeMetricFamily("watchdog_detect_seconds", "Rule evaluation time of the last "
                              "tick (s).", labels=["host"])
        g.add_metric([host], s.last_detect_ms / 1000.0)
        yield g
        lag = GaugeMetricFamily("watchdog_tick_lag_seconds", "How late the last tick ran (s).",
                                labels=["host"])
        lag.add_metric([host], s.last_lag_s)
        yield lag
        with p._lock:  # a consistent view: not in the middle of a tick
            samples = list(p.last_samples)
            active = p.status().get("active_incidents", [])
        for metric, name, doc in GPU_GAUGES:
            fam = GaugeMetricFamily(name, doc, labels=["host", "gpu", "uuid"])
            for smp in samples:
                v = smp.get(metric)
                if v is not None:
                    fam.add_metric([host, str(smp.index), smp.uuid], v)
            yield fam
        inc = GaugeMetricFamily("watchdog_incident_active", "1 per active incident and GPU.",
                                labels=["host", "kind", "severity", "rule", "gpu"])
        for doc_inc in active:
            for gpu in doc_inc["gpus"] or ["node"]:
                inc.add_metric([host, doc_inc["kind"], doc_inc["severity"], doc_inc["rule"],
                                str(gpu)], 1.0)
        yield inc


def serve(pipeline: Any, host: str, port: int, quiet: bool = False) -> tuple[Any, str | None]:
    """Start the endpoint; returns ``(server or None, error or None)``; never raises.
    ``quiet``: a failure is only returned, not logged (the agent's retries)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(PipelineCollector(pipeline))
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except Exception as e:  # noqa: BLE001 - a taken port is a finding, not a crash
        msg = f"metrics endpoint {host}:{port} not started: {type(e).__name__}: {e}"
        if not quiet:
            log.error(msg)
        return None, msg
    log.info("metrics on http://%s:%d/metrics", host, port)
    return server, None
