"""The daemon's hook: anomaly transitions merged into the live pipeline's ticks, and
silence on a GPU where a rule is pending or firing."""

from __future__ import annotations

from anomaly_helpers import healthy_model

from watchdog.anomaly.runner import LiveAnomaly
from watchdog.clock import ManualClock
from watchdog.detect import Detector, load_rules
from watchdog.pipeline.live import LivePipeline
from watchdog.sources.sim import SimSource


def _run(spec: str, minutes: float) -> list[tuple[float, str, object]]:
    rules = load_rules()
    clock = ManualClock(start=1_767_225_600.0)
    hook = LiveAnomaly(healthy_model(), "sim", 1.0)
    agent = LivePipeline(lambda now: SimSource.from_spec(spec, gpus=4, seed=7, start=now),
                         lambda src: Detector(rules, host=src.host, devices=src.devices()),
                         clock, spec=spec, interval=1.0, anomaly=hook)
    seen = []
    for _ in range(int(minutes * 60)):
        seen += [(clock.now(), w, inc) for w, inc in agent.tick()]
        clock.advance(1.0)
    return seen


def test_an_unnamed_fault_pages_through_the_live_pipeline() -> None:
    seen = _run("sim:hbm_sag(gpus=3)@4m", 7.0)
    fired = [(t, inc) for t, w, inc in seen if w == "firing"]
    assert [(inc.kind, inc.gpus) for _, inc in fired] == [("anomaly", ["3"])]
    t, inc = fired[0]
    assert 240 < t - 1_767_225_600.0 < 240 + 120  # within two minutes of the onset
    assert "memory clock" in inc.summary


def test_no_anomaly_on_a_gpu_while_a_rule_is_pending_or_firing() -> None:
    # a thermal throttle is the rules' to name (and moves many features at once)
    seen = _run("sim:thermal_throttle(gpus=3)@4m", 7.0)
    kinds = {(inc.kind, tuple(inc.gpus)) for _, w, inc in seen if w == "firing"}
    assert ("thermal_throttle", ("3",)) in kinds
    assert not [k for k in kinds if k[0] == "anomaly"]
