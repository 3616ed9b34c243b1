"""The daemon's hook: anomaly transitions merged into the live pipeline's ticks, and
silence on a GPU where a rule is pending or firing."""

from __future__ import annotations

import pytest
from anomaly_helpers import healthy_model

from watchdog.anomaly.stage import AnomalyStage
from watchdog.clock import ManualClock
from watchdog.detect import load_rules
from watchdog.pipeline.core import build_detector
from watchdog.pipeline.live import LivePipeline
from watchdog.service.status import _model_line as model_line
from watchdog.sources.sim import SimSource


def _run(spec: str, minutes: float) -> list[tuple[float, str, object]]:
    rules = load_rules()
    clock = ManualClock(start=1_767_225_600.0)
    hook = AnomalyStage(healthy_model(), "sim", 1.0)
    agent = LivePipeline(lambda now: SimSource.from_spec(spec, gpus=4, seed=7, start=now),
                         lambda src: build_detector(rules, host=src.host, devices=src.devices(),
                                                    mode="live"),
                         clock, spec=spec, interval=1.0, anomaly=hook)
    seen = []
    for _ in range(int(minutes * 60)):
        seen += [(clock.now(), w, inc) for w, inc in agent.tick()]
        clock.advance(1.0)
    return seen


@pytest.mark.slow
def test_an_unnamed_fault_pages_through_the_live_pipeline() -> None:
    """The fault starts at 8 min: the job's start-up and warm-up (to about 7 min on this
    node) are not judged (anomaly/grace.py)."""
    seen = _run("sim:hbm_sag(gpus=3)@8m", 11.0)
    fired = [(t, inc) for t, w, inc in seen if w == "firing"]
    assert [(inc.kind, inc.gpus) for _, inc in fired] == [("anomaly", ["3"])]
    t, inc = fired[0]
    assert 480 < t - 1_767_225_600.0 < 480 + 120  # within two minutes of the onset
    assert "memory clock" in inc.summary


def test_no_anomaly_on_a_gpu_while_a_rule_is_pending_or_firing() -> None:
    # a thermal throttle is the rules' to name (and moves many features at once)
    seen = _run("sim:thermal_throttle(gpus=3)@4m", 7.0)
    kinds = {(inc.kind, tuple(inc.gpus)) for _, w, inc in seen if w == "firing"}
    assert ("thermal_throttle", ("3",)) in kinds
    assert not [k for k in kinds if k[0] == "anomaly"]


def _daemon_refits(tmp_path, coarse: bool, minutes: float) -> tuple[object, float | None]:
    """A 2-GPU node whose saved model (``model: auto``, baseline 1 h, refit 24 h) is made
    coarse or not; returns the hook and when (s after start) it refitted, if it did."""
    import copy

    from anomaly_helpers import sim_grid

    from watchdog.anomaly import persist, train
    from watchdog.anomaly.auto import DaemonModel, ModelSettings

    g, feats = sim_grid("sim:healthy", 60.0, gpus=2, seed=1)
    model, _ = train.fit(feats, step=g.step, t=g.t, gpu_model="NVIDIA H100 80GB HBM3",
                         uuids=g.uuids)
    model = copy.deepcopy(model)
    c = model.calibration
    c["holdout_max"] = c["holdout_held"] = c["in_sample_q"] + (1.0 if coarse else 0.0)
    assert train.coarse(model) == coarse
    tmp_path.mkdir()
    path = tmp_path / "anomaly-sim.wdm"
    persist.save(model, path)
    clock = ManualClock(start=1_767_225_600.0)
    hook = DaemonModel(ModelSettings("auto", 3600.0, 86400.0), path, "sim", 1.0,
                       gpu_model=lambda: "NVIDIA H100 80GB HBM3")
    rules = load_rules()
    agent = LivePipeline(lambda now: SimSource.from_spec("sim:healthy", gpus=2, seed=1,
                                                         start=now),
                         lambda src: build_detector(rules, host=src.host, devices=src.devices(),
                                                    mode="live"),
                         clock, spec="sim:healthy", interval=1.0, anomaly=hook)
    first = None
    for i in range(int(minutes * 60)):
        agent.tick()
        if hook._worker is not None:  # the fit's thread: taken up at the next tick
            hook._worker.join()
        if i == 0:
            first = hook.fitted_at
            assert hook.state == "scoring" and hook.coarse == coarse
            shown = model_line(hook.status())
            assert ("(coarse: refits after another 60 busy minutes)" in shown) == coarse
        if hook.fitted_at != first:
            return hook, i
        clock.advance(1.0)
    return hook, None


@pytest.mark.slow
def test_a_coarse_model_is_refitted_after_another_baseline_of_busy_time(tmp_path) -> None:
    """A coarse model (its held-out part scored far above its fit part: a blind
    threshold) still scores, and is refitted once another hour of busy time is in, not a
    day later; the same model, not coarse, waits for its daily refit."""
    hook, at = _daemon_refits(tmp_path / "a", True, 75.0)
    assert at is not None and 3600 <= at <= 72 * 60  # 60 busy minutes: at 70 min
    assert hook.status()["busy_min"] >= 60.0
    fine, at = _daemon_refits(tmp_path / "b", False, 75.0)
    assert at is None and fine.status()["coarse"] is False
