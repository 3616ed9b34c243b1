"""Replay = live for the model: the agent (tick by tick, its detector batching healthy
ticks) and ``watchdog replay --model`` over the agent's own recording go through the one
scoring stage and raise the same anomaly incidents, quiet where a rule was engaged."""

from __future__ import annotations

from pathlib import Path

import pytest
from anomaly_helpers import healthy_model

from watchdog.anomaly import persist
from watchdog.anomaly.offline import apply
from watchdog.anomaly.stage import AnomalyStage
from watchdog.clock import ManualClock
from watchdog.detect import load_rules
from watchdog.pipeline.core import build_detector
from watchdog.pipeline.live import LivePipeline
from watchdog.pipeline.replay import ReplayOptions, replay_inputs
from watchdog.service.recorder import Recorder
from watchdog.sources.sim import SimSource

START = 1_767_225_600.0
# an unnamed fault on GPU 3 for the model, a throttle on GPU 1 for the rules (engaged:
# the model must stay quiet there), and healthy GPUs around them
SPEC = "sim:hbm_sag(gpus=3)@4m,thermal_throttle(gpus=1)@5m"


def _key(inc) -> tuple:  # type: ignore[no-untyped-def]
    return (inc.kind, tuple(inc.gpus), inc.started_at, inc.fired_at, inc.resolved_at,
            inc.evidence.get("score"))


@pytest.mark.slow
def test_replay_of_the_agents_recording_pages_what_the_agent_paged(tmp_path: Path) -> None:
    model = healthy_model()
    rules = load_rules()
    clock = ManualClock(start=START)
    stage = AnomalyStage(model, "sim-node", 1.0)
    recorder = Recorder(tmp_path / "rec", 86_400.0, source=SPEC)
    agent = LivePipeline(lambda now: SimSource.from_spec(SPEC, gpus=4, seed=7, start=now),
                         lambda src: build_detector(rules, host=src.host,
                                                    devices=src.devices(), mode="live"),
                         clock, spec=SPEC, interval=1.0, anomaly=stage, recorder=recorder)
    live = []
    for _ in range(12 * 60):
        live += [inc for what, inc in agent.tick() if what == "firing"]
        clock.advance(1.0)
    agent.detector.flush_ticks()  # the last ticks evaluated, the windows waiting on them
    live_anomalies = [i for i in stage.judge(agent.detector.engaged) if i[0] == "firing"]
    recorder.close()
    live = [i for i in live if i.kind == "anomaly"] + [i for _, i in live_anomalies]
    assert [i.gpus for i in live] == [["3"]]  # the fault found, the throttled GPU left alone
    assert any(i.kind == "thermal_throttle" for i in agent.detector.incidents)

    (path,) = sorted((tmp_path / "rec").glob("*.wdrec"))
    model_file = tmp_path / "m.wdm"
    persist.save(model, model_file)
    results = replay_inputs([str(path)], rules, ReplayOptions())
    apply(results, str(model_file), None, note=lambda line: None)
    replayed = [i for i in results[0].incidents if i.kind == "anomaly"]
    assert [_key(i) for i in replayed] == [_key(i) for i in stage.incidents]


def test_a_window_waits_for_the_detector_to_reach_its_tick() -> None:
    """Live, the detector evaluates healthy ticks five seconds at a time: a window due at
    a tick it has not evaluated yet is judged once it has, never against an older view of
    which GPUs a rule holds."""
    from watchdog.detect.engaged import EngagedTimeline

    model = healthy_model()
    stage = AnomalyStage(model, "n", 1.0)
    src = SimSource.from_spec("sim:healthy", gpus=4, seed=1, start=START)
    timeline = EngagedTimeline()
    for k in range(120):
        stage.add_samples(START + k, src.sample(START + k))
    assert stage._due  # windows are due
    timeline.evaluated(START + 60)
    before = len(stage._due)
    stage.judge(timeline)
    assert 0 < len(stage._due) < before  # only those up to the detector's tick were judged
    assert all(t > START + 60 for t, *_ in stage._due)
