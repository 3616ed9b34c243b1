"""The agent's Prometheus endpoint, fit for fleet rules: base units, OpenMetrics names,
`node` on every series, `gpu`/`uuid`/`job_id` on per-GPU ones (never `job`), and a
cardinality budget per 8-GPU node (watchdog/service/metrics.py says it)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from watchdog import config as config_mod
from watchdog.clock import ManualClock
from watchdog.incident import KINDS, Incident
from watchdog.pipeline.status import TickStats
from watchdog.records import ProcessInfo
from watchdog.service.jobs import JobConfig, JobTracker
from watchdog.service.metrics import BUDGET, PipelineCollector, budget
from watchdog.sources import SourceOptions
from watchdog.sources.sim import SimSource

START = 1_750_000_000.0


def scrape(collector: Any) -> list[tuple[str, dict[str, str], float]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    text = generate_latest(reg).decode()
    return [(s.name, dict(s.labels), s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def stub(spec: str = "sim:comm_hang@2m", at: float = 400.0, sinks: int = 3,
         incidents: list[Incident] | None = None) -> tuple[Any, JobTracker]:
    src = SimSource.from_spec(spec, gpus=8, start=START, host="gpu-node-017")
    samples = src.sample(START + at)
    jobs = JobTracker()
    jobs.observe(START + at, samples)
    levels = {s.uuid: {"idle_w": 70.0, "busy_w": 690.0, "max_sm_mhz": 1980.0}
              for s in samples}
    detector = SimpleNamespace(incidents=incidents or [], learned_levels=lambda: levels)
    notifier = SimpleNamespace(status=lambda: {"sinks": {
        f"s{i}": {"type": "log", "pending": 0, "sent": 3, "oldest_pending_s": None,
                  "failing_since": None, "undeliverable": 0} for i in range(sinks)},
        "alerts_firing": 0, "dropped": 0})
    p = SimpleNamespace(stats=TickStats(ticks=5), host="gpu-node-017", source=src,
                        last_samples=samples, detector=detector, own=SimpleNamespace(active={}),
                        alerting=notifier, _lock=threading.Lock())
    return p, jobs


def hang(uuids: list[str]) -> Incident:
    return Incident(kind="comm_hang", severity="critical", host="gpu-node-017",
                    gpus=[str(i) for i in range(len(uuids))], uuids=uuids,
                    started_at=START + 120, fired_at=START + 270, resolved_at=None,
                    rule="comm_hang", summary="hung")


def test_names_units_and_labels() -> None:
    p, jobs = stub()
    got = scrape(PipelineCollector(p, jobs))
    names = {n for n, _, _ in got}
    for want in ("watchdog_gpu_power_watts", "watchdog_gpu_memory_used_bytes",
                 "watchdog_gpu_utilization_ratio", "watchdog_gpu_temperature_celsius",
                 "watchdog_gpu_power_busy_ratio", "watchdog_gpu_hang",
                 "watchdog_gpu_clock_event_reasons", "watchdog_gpu_clock_slowdown",
                 "watchdog_gpu_sm_clock_hertz", "watchdog_build_info", "watchdog_job_info",
                 "watchdog_incidents", "watchdog_ticks_total", "watchdog_notify_pending",
                 "watchdog_notify_sent_total", "process_resident_memory_bytes"):
        assert want in names, want
    for name, labels, _ in got:
        assert labels.get("node") == "gpu-node-017", name  # every series: the agent's host
        assert "job" not in labels and "host" not in labels, name
        if name.startswith("watchdog_gpu_"):
            assert set(labels) == {"node", "gpu", "uuid", "job_id"}, name
    util = [v for n, _, v in got if n == "watchdog_gpu_utilization_ratio"]
    assert util and all(0.0 <= v <= 1.0 for v in util)
    mem = [v for n, _, v in got if n == "watchdog_gpu_memory_used_bytes"]
    assert min(mem) > 1e9  # bytes, not MiB
    [info] = [lab for n, lab, _ in got if n == "watchdog_job_info"]
    job = SimSource.from_spec("sim", start=0.0).job.slurm_job_id
    assert info["job_id"] == job and info["scheduler"] == "slurm"
    assert {lab["job_id"] for n, lab, _ in got if n == "watchdog_gpu_hang"} == {job}
    assert {lab["kind"] for n, lab, _ in got if n == "watchdog_incidents"} == set(KINDS)


def test_the_hang_and_the_lost_gpu_are_zero_or_one_per_gpu() -> None:
    p, jobs = stub("sim:comm_hang@2m,gpu_lost(gpus=7)@2m")
    hung = [s.uuid for s in p.last_samples if s.index < 7]
    p.detector.incidents = [hang(hung)]
    got = scrape(PipelineCollector(p, jobs))
    by_gpu = {(n, lab["gpu"]): v for n, lab, v in got if n.startswith("watchdog_gpu_")}
    assert [by_gpu[("watchdog_gpu_hang", str(i))] for i in range(8)] == [1.0] * 7 + [0.0]
    assert by_gpu[("watchdog_gpu_lost", "7")] == 1.0
    assert ("watchdog_gpu_power_watts", "7") not in by_gpu  # a lost GPU reads nothing
    assert by_gpu[("watchdog_gpu_power_busy_ratio", "0")] < 0.1  # hung: at its idle level
    active = [lab for n, lab, _ in got if n == "watchdog_incident_active"]
    assert len(active) == 7 and {a["kind"] for a in active} == {"comm_hang"}
    assert [v for n, lab, v in got if n == "watchdog_incidents" and lab["kind"] ==
            "comm_hang"] == [1.0]


def test_a_crashed_rank_keeps_its_job_label() -> None:
    p, jobs = stub("sim:rank_crash@2m", at=100.0)
    src = p.source
    later = src.sample(START + 400.0)
    assert all(s.processes == () for s in later)
    jobs.observe(START + 400.0, later)
    p.last_samples = later
    got = scrape(PipelineCollector(p, jobs))
    assert {lab["job_id"] for n, lab, _ in got if n == "watchdog_gpu_utilization_ratio"} == \
        {src.job.slurm_job_id}


def test_the_cardinality_budget_of_an_8_gpu_node() -> None:
    assert budget(8, 3) <= BUDGET == 200
    p, jobs = stub("sim:healthy", sinks=3)
    healthy = scrape(PipelineCollector(p, jobs))
    assert len(healthy) <= budget(8, 3), len(healthy)
    p.detector.incidents = [hang([s.uuid for s in p.last_samples])]
    during = scrape(PipelineCollector(p, jobs))
    assert len(during) <= BUDGET + 8  # one watchdog_incident_active per GPU of the incident
    two_jobs = JobTracker()
    samples = p.last_samples
    two_jobs.observe(START, [dataclasses.replace(s, processes=(ProcessInfo(
        pid=1, job_id=str(s.index % 2)),)) for s in samples])
    assert len(scrape(PipelineCollector(p, two_jobs))) <= BUDGET + 8 + 1


def test_the_configs_job_labels_every_gpu() -> None:
    p, _ = stub("sim:healthy")
    got = scrape(PipelineCollector(p, JobTracker(JobConfig(id="4242"))))
    assert {lab["job_id"] for n, lab, _ in got if n == "watchdog_gpu_power_watts"} == {"4242"}
    [info] = [lab for n, lab, _ in got if n == "watchdog_job_info"]
    assert info["scheduler"] == "config"


def test_no_job_is_an_empty_label_and_no_notifier_no_sink_series() -> None:
    p, _ = stub("sim:healthy")
    p.alerting = None
    got = scrape(PipelineCollector(p, JobTracker()))
    assert not any(n.startswith("watchdog_notify_") for n, _, _ in got)
    assert not any(n == "watchdog_job_info" for n, _, _ in got)
    assert {lab.get("job_id", "") for n, lab, _ in got if n == "watchdog_gpu_hang"} == {""}


# --- the agent, built as `watchdog run` builds it ----------------------------------------

def test_a_running_agent_serves_the_fleet_series_and_status_says_the_job(
        tmp_path: Path) -> None:
    cfg_file = tmp_path / "w.yaml"
    cfg_file.write_text("source: sim:comm_hang@2m\nhost: gpu-node-017\njob: {id: '4242'}\n"
                        "notify:\n  sinks:\n    a: {type: log}\n    b: {type: log}\n")
    cfg = config_mod.load(cfg_file)
    from watchdog.service.agent import build

    clock = ManualClock(START)
    agent = build(cfg, spec=cfg.source, options=SourceOptions(host=cfg.host, sim_gpus=8),
                  interval=1.0, speed=1.0, rules_override=[],
                  state_dir=str(tmp_path / "state"), demo=False, clock=clock, stop_after=None)
    try:
        p = agent.pipeline
        for _ in range(400):
            p.tick()
            clock.advance(1.0)
        got = scrape(PipelineCollector(p, agent.jobs))
        doc = p.status()
    finally:
        agent.pipeline.close(drain_s=0)
        agent.db.close()
        agent.lock.release()
    hung = {lab["gpu"] for n, lab, v in got if n == "watchdog_gpu_hang" and v == 1.0}
    assert hung == {str(i) for i in range(8)}
    assert {lab["job_id"] for n, lab, _ in got if n == "watchdog_gpu_hang"} == {"4242"}
    assert len(got) <= budget(8, 2) + 8
    assert doc["job"]["source"] == "config" and doc["job"]["jobs"][0]["id"] == "4242"
    from watchdog.service.status import render

    assert "job: 4242 (config) on GPU 0-7 · from the config (id: 4242)" in render(
        {**doc, "state_dir": "x"}, START)


@pytest.mark.parametrize("listen", ["0.0.0.0:9849", ":9849"])
def test_listen_on_every_interface_for_a_fleet(listen: str) -> None:
    from watchdog.service.metrics import parse_listen

    assert parse_listen(listen, "x")[1] == 9849
