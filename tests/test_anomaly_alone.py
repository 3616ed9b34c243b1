"""A GPU alone slowing down (:mod:`watchdog.anomaly.alone`): ``own_power``, its power
against what it drew at the same activity in its work."""

from __future__ import annotations

import copy

import numpy as np
from gate_helpers import (
    alone_then,
    idle,
    steady,
)

from watchdog.anomaly import alone, consensus
from watchdog.anomaly import features as F
from watchdog.anomaly import gate_limits as L
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.gate_state import GpuState
from watchdog.detect.evaluate import JOB_MEMORY_PTS


def test_a_gpu_alone_drawing_less_at_the_same_activity_is_judged_on_own_power() -> None:
    """Issue 19: power at 65 % of a new job's own at the same utilization, memory and
    clocks on a 1-GPU node lies at a level the first job's lighter phase holds, and every
    other feature reads normal (0 of 6 found by ``model_jobs.py --faults``). The GPU
    remembers what it drew at each activity of its work; the same activity (memory
    bandwidth, SM and tensor activity) at SLOW_FALL of its limit and SLOW_FRAC of that
    power or more less is judged (``own_power``), first in the page's words."""
    from watchdog.anomaly import explain

    model, uuids, row = steady()
    one, u = row[:1].copy(), uuids[:1]
    one[0, F.INDEX["temp_slope"]] = 0.0
    pf, op = F.INDEX["power_frac"], F.INDEX["own_power"]
    p0 = float(one[0, pf])
    assert p0 * L.SLOW_FRAC < L.SLOW_FALL  # here the fall in points of the limit binds

    def at(power: float, base: np.ndarray = one, **levels: float) -> np.ndarray:
        x = base.copy()
        x[0, pf] = power
        for name, v in levels.items():
            x[0, F.INDEX[name]] = v
        return x

    gate, f2, s, judged = alone_then(model, u, one, at(p0 - 0.28))
    assert gate.gpus[u[0]].works, "the normal windows' activity is remembered"
    assert np.isclose(f2[0, op], -0.28) and judged and s > model.threshold
    assert explain.top_features(model, f2[0])[0]["feature"] == "own_power"
    # the threshold from both sides: SLOW_FALL of the limit...
    for fall, slow in ((L.SLOW_FALL - 0.01, False), (L.SLOW_FALL + 0.01, True)):
        _g, f2, _s, _j = alone_then(model, u, one, at(p0 - fall))
        assert (not np.isnan(f2[0, op])) is slow, fall
    # ... and SLOW_FRAC of its power where that is more (a heavy phase at 0.9)
    heavy = at(0.9, tensor_active=60.0, mem_util=44.0)
    for frac, slow in ((L.SLOW_FRAC - 0.02, False), (L.SLOW_FRAC + 0.02, True)):
        _g, f2, _s, _j = alone_then(model, u, heavy, at(0.9 * (1 - frac), heavy))
        assert (not np.isnan(f2[0, op])) is slow, frac
    # another activity at that power (a lighter phase: less memory traffic) is not it
    _g, f2, _s, _j = alone_then(model, u, one, at(p0 - 0.28, mem_util=float(
        one[0, F.INDEX["mem_util"]]) - 2 * L.ACTIVITY["mem_util"]))
    assert np.isnan(f2[0, op])
    # nothing but utilization and memory used read: a lighter phase looks the same
    blind = at(p0, mem_util=np.nan, sm_active=np.nan, tensor_active=np.nan)
    _g, f2, _s, _j = alone_then(model, u, blind, at(p0 - 0.28, blind))
    assert np.isnan(f2[0, op])
    # with PEERS_MIN of its job at work the peers judge it (peer_power), not its own
    # past; in a job of fewer, its own past does
    for n, own in ((L.PEERS_MIN, False), (L.PEERS_MIN - 1, True)):
        job = row[:n].copy()
        job[:, F.INDEX["temp_slope"]] = 0.0
        low = job.copy()
        low[1, pf] -= 0.28
        _g, f2, _s, _j = alone_then(model, uuids[:n], job, low)
        assert np.isnan(f2[0, op]) and (not np.isnan(f2[1, op])) is own, n
    # a GPU at work that the memory it holds sets apart from the others at work (another
    # job's, or a rank 0 holding less): not its own past
    apart = row[:L.PEERS_MIN].copy()
    apart[:, F.INDEX["temp_slope"]] = 0.0
    apart[1, F.INDEX["mem_ratio"]] -= 2 * JOB_MEMORY_PTS / 100.0
    low = apart.copy()
    low[1, pf] -= 0.28
    _g, f2, _s, _j = alone_then(model, uuids[:L.PEERS_MIN], apart, low)
    assert np.isnan(f2[:, op]).all()

def test_a_slowed_gpu_alone_back_in_a_heavier_phase_is_no_new_job() -> None:
    """Power up by more than HEAVIER_PHASE over its normal is a GPU alone's heavier phase (a
    new workload), but not when it draws less than it drew at that activity before: a
    GPU slowed from its lighter phase on (a100 1-GPU seed 3 of ``model_jobs.py
    --faults``) re-learned its slowed heavy phase as a new job."""
    model, uuids, row = steady()
    u = uuids[0]
    gate = Gate(model)
    gate.gpus[u] = GpuState(seen=True, ref=(98.0, 0.9, 0.4))
    x = row[0].copy()
    x[F.INDEX["power_frac"]] = 0.4 + L.HEAVIER_PHASE + 0.05
    assert consensus.has_evidence(gate.state, u, x, alone=True)
    x[F.INDEX["own_power"]] = -0.3
    assert not consensus.has_evidence(gate.state, u, x, alone=True)

def test_a_gpu_alone_that_released_its_memory_is_on_new_work_and_a_checkpoint_is_not() -> None:
    """A job that follows another after a short idle spell (72 s: a checkpoint's length)
    at the same activity and memory but 0.2 of its limit less power is a new process,
    not a slowdown, when the GPU released its memory while idle (h100 1-GPU seeds 9 and
    13 of the week's stream: 10 and 12 false "power ... -20 points"); a checkpoint holds
    its memory, and what the GPU drew before still counts."""
    model, uuids, row = steady()
    one, u = row[:1].copy(), uuids[:1]
    one[0, F.INDEX["temp_slope"]] = 0.0
    pf, op, mem = F.INDEX["power_frac"], F.INDEX["own_power"], F.INDEX["mem_ratio"]
    low = one.copy()
    low[0, pf] -= 0.2

    def after_pause(released: bool) -> float:
        gate, t = Gate(model), 0.0
        pause = idle(one, [0])
        if released:
            pause[0, mem] = L.MEMBER_MEM / 2
        for x, secs in ((one, 800.0), (pause, 70.0), (low, 120.0)):
            end = t + secs
            while t < end:
                f2, _s, _skip = gate.step(t, u, x, model.scores(np.where(np.isnan(x),
                                                                          model.fill, x)), set())
                t += 10.0
        return float(f2[0, op])

    assert np.isclose(after_pause(released=False), -0.2)
    assert np.isnan(after_pause(released=True))

def test_a_gpu_alone_keeps_its_steady_activity_apart_from_its_ramp_into_it() -> None:
    """A job ramps into its phase: a window on the way (memory-controller activity 0.9
    of a tolerance under the phase's) must not hold the steady phase as its own, or a
    slowdown just past the ramp's tolerance is learned as a new activity (a100 1-GPU
    seed 1 of ``model_jobs.py --faults``: found at 407 s, at its next phase, instead of
    67 s). A normal window within SAME_ACTIVITY_REACH of a remembered activity is that activity;
    further, it is one of its own."""
    model, uuids, row = steady()
    one, u = row[:1].copy(), uuids[:1]
    one[0, F.INDEX["temp_slope"]] = 0.0
    mu, pf, op = F.INDEX["mem_util"], F.INDEX["power_frac"], F.INDEX["own_power"]
    tol = L.ACTIVITY["mem_util"]
    ramp = one.copy()
    ramp[0, mu] -= 0.9 * tol
    slow = one.copy()
    slow[0, mu] += 0.2 * tol  # 1.1 tolerances from the ramp's, 0.2 from the phase's
    slow[0, pf] -= 0.28
    gate, t = Gate(model), 0.0
    for x, secs in ((ramp, 300.0), (one, 300.0), (slow, 10.0)):  # the ramp learned first
        end = t + secs
        while t < end:
            f2, _s, _skip = gate.step(t, u, x, model.scores(np.where(np.isnan(x), model.fill,
                                                                        x)), set())
            t += 10.0
    assert len(gate.gpus[u[0]].works) == 2
    assert np.isclose(f2[0, op], -0.28)

def test_a_gpu_alone_within_its_own_power_swing_at_an_activity_is_not_slowing() -> None:
    """own_power also needs the window under the mean power of the judged-normal windows
    at that activity by SLOW_NOISE_K of their spread: a real V100 alone, sampled every
    30 s, drew 0.47 +- 0.05 of its limit at one activity, at most 0.58, and windows at
    0.36-0.41 (under the most by SLOW_FALL and SLOW_FRAC) paged 3 times."""
    model, uuids, row = steady()
    one, u = row[:1].copy(), uuids[:1]
    one[0, F.INDEX["temp_slope"]] = 0.0
    pf, op = F.INDEX["power_frac"], F.INDEX["own_power"]
    gate = Gate(model)
    rng = np.random.default_rng(3)
    t = 0.0
    for _ in range(120):
        x = one.copy()
        x[0, pf] = float(np.clip(rng.normal(0.47, 0.05), 0.36, 0.58))
        gate.step(t, u, x, model.scores(np.where(np.isnan(x), model.fill, x)), set())
        t += 10.0
    work = alone.works_at(gate.gpus[u[0]], one[0])
    assert work is not None and 0.03 < np.sqrt(work.var) < 0.07
    edge = work.mean - L.SLOW_NOISE_K * np.sqrt(work.var)
    assert edge < work.most - L.SLOW_FALL  # here the spread binds
    for power, slow in ((edge + 0.01, False), (edge - 0.01, True)):
        x = one.copy()
        x[0, pf] = power
        f2, _s, _k = copy.deepcopy(gate).step(
            t, u, x, model.scores(np.where(np.isnan(x), model.fill, x)), set())
        assert (not np.isnan(f2[0, op])) is slow, power
