"""Phases and known normals (:mod:`watchdog.anomaly.phases`): a GPU alone back at a
phase of its job, a node back on a job it ran before."""

from __future__ import annotations

import numpy as np
from gate_helpers import (
    steady,
)

from watchdog.anomaly import features as F
from watchdog.anomaly import gate_limits as L
from watchdog.anomaly import phases, relearn
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.gate_state import Normal


def test_a_gpu_alone_back_at_a_phase_its_job_held_is_judged_only_past_it() -> None:
    """A GPU working alone whose job switches between a heavy and a light phase at the
    same utilization and memory used (less memory traffic): its first light phase
    departs and is judged (nothing tells it from a slowdown yet); back at that level
    after the heavy phase, it is a phase of its job and not judged, until it lasts
    longer than the phase ever did (plus PHASE_SLACK_S): a slowdown at that level still
    pages. A drift (own_temp out of range) at that level is judged at once."""
    model, uuids, row = steady()
    one, u = row[:1].copy(), uuids[:1]
    one[0, F.INDEX["temp_slope"]] = 0.0
    k = F.INDEX["power_frac"]
    light = one.copy()
    light[0, k] = float(model.lo[k]) - 0.06  # below the training range, furthest out
    # less memory traffic than the heavy phase (at the same activity it is a slowdown:
    # own_power, judged at once, test_a_gpu_alone_drawing_less_at_the_same_activity...)
    light[0, F.INDEX["mem_util"]] -= 2 * L.ACTIVITY["mem_util"]
    drift = light.copy()
    drift[0, F.INDEX["own_temp"]] = float(model.hi[F.INDEX["own_temp"]]) + 20.0

    def walk(plan: list[tuple[np.ndarray, float]]) -> list[tuple[float, float, bool]]:
        """(age in its stay, score judged, judged) of each window of the plan's last
        stay; the light phase and the drift score over the threshold, the heavy under."""
        gate, t, out = Gate(model), 0.0, []
        for x, secs in plan:
            start, out = t, []
            while t < start + secs:
                s = np.array([model.threshold + (0.2 if x is not one else -0.3)])
                _f, got, skip = gate.step(t, u, x, s, set())
                out.append((t - start, float(got[0]), u[0] not in skip))
                t += 10.0
        return out

    first = walk([(one, 800), (light, 180)])
    assert all(judged and s > model.threshold for _a, s, judged in first[1:])
    again = walk([(one, 800), (light, 180), (one, 120), (light, 400)])
    over = [(age, judged) for age, s, judged in again if s > model.threshold]
    assert len(over) >= len(again) - 2
    assert not any(judged for age, judged in over if age <= 180 + L.PHASE_SLACK_S)
    assert all(judged for age, judged in over if age > 180 + L.PHASE_SLACK_S + 10)
    hot = walk([(one, 800), (light, 180), (one, 120), (drift, 60)])
    assert all(judged and s > model.threshold for _a, s, judged in hot[1:])

def test_a_known_normal_is_the_best_fit_and_a_gpu_it_missed_takes_its_peers_memory() -> None:
    """Back to a known normal, the gate takes the one most GPUs fit (then the lowest
    scores), not the first: a normal learned before one GPU re-allocated fits the others
    as well but holds that GPU's old memory (h100 4-GPU seed 8 of the week's stream).
    With only such a normal, the GPU that does not fit takes the median memory offset of
    those that do where that brings it under (a100 8-GPU seed 7), keeping its own other
    offsets (its place in the airflow: the hot GPU took its peers' temperature offsets,
    h100 4-GPU seed 9); a GPU that departs from its peers (its SM clock 30 % low) stays
    over the threshold and is judged."""
    model, uuids, row = steady()
    k = F.INDEX["mem_ratio"]
    raw = row.copy()
    raw[:, k] -= 0.3  # a job holding 30 % less memory on every GPU
    judged = list(range(len(uuids)))
    thr = model.threshold

    def offsets(mem: list[float]) -> Normal:
        out = {}
        for u, m in zip(uuids, mem, strict=True):
            off = np.zeros(len(F.FEATURES))
            off[k] = m
            out[u] = off
        return out

    stale = offsets([0.0, -0.3, -0.3, -0.3])  # GPU 0's entry from before it re-allocated
    stale[uuids[0]][F.INDEX["temp_mean"]] = 2.0  # and its own temperature offset
    good = offsets([-0.3] * 4)
    gate = Gate(model)
    # the fitted normal: all over
    assert (relearn.apply(gate.state, uuids, raw, None, {})[1] > thr).all()
    gate.state.normals = [gate.state.current, stale, good]
    _f, s = phases.known(gate.state, uuids, raw, judged)
    assert gate.state.current is good and (s <= thr).all()
    gate = Gate(model)
    gate.state.normals = [gate.state.current, stale]
    _f, s = phases.known(gate.state, uuids, raw, judged)
    assert (s <= thr).all() and gate.state.current[uuids[0]][k] == -0.3
    assert gate.state.current[uuids[0]][F.INDEX["temp_mean"]] == 2.0
    faulty = raw.copy()
    faulty[0, F.INDEX["sm_clock_frac"]] -= 0.3
    gate = Gate(model)
    gate.state.normals = [gate.state.current, stale]
    _f, s = phases.known(gate.state, uuids, faulty, judged)
    assert s[0] > thr and (s[1:] <= thr).all()
