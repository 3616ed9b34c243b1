"""The agent is built in one pass and one Settings object owns the interval and the rules:
a reload (SIGHUP) that changes them reaches every part at once, the anomaly model's windows
included (they once kept the old step)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from watchdog.clock import ManualClock
from watchdog.config import Config
from watchdog.service.agent import build
from watchdog.sources import SourceOptions


def _agent(tmp_path: Path, cfg: Config):  # type: ignore[no-untyped-def]
    return build(cfg, spec="sim:healthy", options=SourceOptions(sim_gpus=2), interval=1.0,
                 speed=1.0, rules_override=[], state_dir=str(tmp_path / "state"), demo=False,
                 clock=ManualClock(1_750_000_000.0), stop_after=None,
                 load_config=lambda _path: dataclasses.replace(cfg, interval=2.0))


def test_a_reload_changes_the_interval_for_ticker_pipeline_and_model(tmp_path: Path) -> None:
    cfg = Config(source="sim:healthy", model="auto", path=str(tmp_path / "w.yaml"))
    agent = _agent(tmp_path, cfg)
    try:
        p, model = agent.pipeline, agent.pipeline.anomaly
        p.tick()
        assert model is not None and model.stage.interval == 1.0
        note = agent.reload()
        assert "interval now 2s" in note
        assert agent.settings.interval == 2.0
        assert p.interval == 2.0 and agent.daemon.interval == 2.0
        assert model.interval == 2.0 and model.stage.interval == 2.0
        from watchdog.anomaly import features as F

        assert model.stage.w == F.window_ticks(2.0)  # rebuilt: a window of 2 s ticks
        assert p.status()["interval_s"] == 2.0
    finally:
        agent.pipeline.close(drain_s=0)
        agent.db.close()
        agent.lock.release()


def test_new_rules_reach_the_detector_and_the_alerting_lookup(tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "hot.yaml").write_text("""rules:
  - name: hot_only
    kind: thermal_throttle
    severity: warning
    condition: temperature.gpu > 95
    for: 0s
    summary: GPU {gpus} hot
""")
    cfg = Config(source="sim:healthy", path=str(tmp_path / "w.yaml"))
    agent = build(cfg, spec="sim:healthy", options=SourceOptions(sim_gpus=2), interval=1.0,
                  speed=1.0, rules_override=[], state_dir=str(tmp_path / "state"),
                  demo=False, clock=ManualClock(1_750_000_000.0), stop_after=None,
                  load_config=lambda _p: dataclasses.replace(cfg, rules=(str(rules_dir),)))
    try:
        agent.pipeline.tick()
        before = {r.name for r in agent.pipeline.detector.rules}
        assert "hot_only" not in before and len(before) > 1
        agent.reload()
        assert {r.name for r in agent.pipeline.detector.rules} == {"hot_only"}
        assert agent.settings.rule_info("hot_only") == ("gpu", None)
    finally:
        agent.pipeline.close(drain_s=0)
        agent.db.close()
        agent.lock.release()


def test_a_shadow_agent_never_acts_on_the_scheduler(tmp_path: Path) -> None:
    """`run --shadow` beside the node's agent notifies nobody and drains nothing: with a
    `slurm:` section it builds no Slurm actor (the node's own agent does)."""
    from watchdog.service.slurm import parse_config

    slurm = parse_config({"dry_run": True, "node": "n1"}, "w.yaml:slurm")
    cfg = Config(source="sim:healthy", path=str(tmp_path / "w.yaml"), slurm=slurm)
    for shadow, acts in ((False, True), (True, False)):
        agent = build(cfg, spec="sim:healthy", options=SourceOptions(sim_gpus=2), interval=1.0,
                      speed=1.0, rules_override=[], state_dir=str(tmp_path / f"s{shadow}"),
                      demo=False, clock=ManualClock(1_750_000_000.0), stop_after=None,
                      shadow=shadow)
        try:
            assert (agent.slurm is not None) is acts
        finally:
            if agent.slurm is not None:
                agent.slurm.stop()
            agent.pipeline.close(drain_s=0)
            agent.db.close()
            agent.lock.release()


def test_the_configs_retention_reaches_the_pipeline_and_a_reload_changes_it(
        tmp_path: Path) -> None:
    cfg = Config(source="sim:healthy", path=str(tmp_path / "w.yaml"), retention_s=7 * 86_400.0)
    agent = build(cfg, spec="sim:healthy", options=SourceOptions(sim_gpus=2), interval=1.0,
                  speed=1.0, rules_override=[], state_dir=str(tmp_path / "state"),
                  demo=False, clock=ManualClock(1_750_000_000.0), stop_after=None,
                  load_config=lambda _p: dataclasses.replace(cfg, retention_s=2 * 86_400.0))
    try:
        assert agent.pipeline.settings.retention_s == 7 * 86_400.0  # what the prune uses
        agent.reload()
        assert agent.pipeline.settings.retention_s == 2 * 86_400.0
    finally:
        agent.pipeline.close(drain_s=0)
        agent.db.close()
        agent.lock.release()
