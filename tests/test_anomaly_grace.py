"""Grace (:mod:`watchdog.anomaly.grace`): start-up, warm-up, checkpoints, the recovery
after a rule and a temperature lagging its power are not judged."""

from __future__ import annotations

import numpy as np
import pytest
from anomaly_helpers import healthy_model, sim_grid
from gate_helpers import (
    idle,
    skipped_for,
    steady,
    walk,
)

from watchdog.anomaly import features as F
from watchdog.anomaly import gate_limits as L
from watchdog.anomaly import grace
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.stage import AnomalyStage


def test_start_up_is_not_judged_for_two_minutes_and_at_most_five() -> None:
    model, uuids, row = steady()
    times = [1000.0 + 10 * k for k in range(40)]
    skips = walk(Gate(model), [(t, row, set()) for t in times])
    wait = skipped_for(skips, times, uuids[0], times[0])
    assert L.WARM_MIN_S <= wait <= L.GRACE_MAX_S

def test_a_warm_up_after_an_idle_gap_and_a_checkpoint_get_their_grace() -> None:
    model, uuids, row = steady()
    gate = Gate(model)
    times = [1000.0 + 10 * k for k in range(200)]
    idle_gap = (1400.0, 1400.0 + 400)  # 400 s idle: a warm-up
    ckpt = (2400.0, 2460.0)  # 60 s idle: a checkpoint
    windows = []
    for t in times:
        paused = idle_gap[0] <= t < idle_gap[1] or ckpt[0] <= t < ckpt[1]
        windows.append((t, idle(row, [0, 1, 2, 3]) if paused else row, set()))
    skips = walk(gate, windows)
    after_gap = skipped_for(skips, times, uuids[2], idle_gap[1])
    assert L.WARM_MIN_S <= after_gap <= L.GRACE_MAX_S
    assert skipped_for(skips, times, uuids[2], ckpt[1]) == L.CKPT_GRACE_S
    assert not any(u in skips[times.index(2300.0)] for u in uuids)  # judged in between

def test_a_gpu_lagging_behind_its_power_step_is_not_judged_on_its_temperature() -> None:
    """Its power stepped up by a third of its limit within 3 min and its temperature
    climbs towards it at +7 C/min: the temperature and its trend follow the power (each
    GPU at its own time constant) and read as normal, whatever trends the fit saw. The
    same climb at unchanged power, above its own line (a drift, a failing fan), is
    judged, and so is the power itself."""
    model, uuids, row = steady()
    k_temp, k_pow = F.INDEX["temp_slope"], F.INDEX["power_frac"]
    row = row.copy()
    row[:, k_temp] = 0.0  # settled
    times = [1000.0 + 10 * k for k in range(40)]

    def judged(x: np.ndarray) -> np.ndarray:
        gate = Gate(model)
        walk(gate, [(t, row, set()) for t in times])
        s = model.scores(np.where(np.isnan(x), model.fill, x))
        return gate.step(1400.0, uuids, x, s, set())[0]

    stepped = row.copy()
    stepped[0, k_pow] += 0.33
    stepped[0, k_temp] = 7.0
    f = judged(stepped)
    assert np.isnan(f[0, k_temp]) and np.isnan(f[0, F.INDEX["temp_mean"]])
    assert f[0, k_pow] == stepped[0, k_pow]  # the power itself is judged
    assert not np.isnan(f[1, k_temp])  # its peers, no step: as they are
    drift = row.copy()
    drift[0, k_temp] = 7.0
    drift[0, F.INDEX["temp_mean"]] += 10.0  # above its own line, moving away from it
    assert judged(drift)[0, k_temp] == 7.0

def test_the_recovery_after_a_rule_incident_is_not_judged() -> None:
    model, uuids, row = steady()
    times = [1000.0 + 10 * k for k in range(120)]
    held = (1500.0, 1700.0)  # a rule pending or firing on GPU 1
    windows = [(t, row, {uuids[1]} if held[0] <= t < held[1] else set()) for t in times]
    skips = walk(Gate(model), windows)
    assert all(uuids[1] in skips[times.index(t)] for t in times if held[0] <= t < held[1])
    wait = skipped_for(skips, times, uuids[1], held[1])
    assert L.RECOVERY_MIN_S <= wait <= L.GRACE_MAX_S
    assert uuids[0] not in skips[times.index(1600.0)]  # its peers judged meanwhile

def test_training_reads_no_peer_power_in_each_gpus_start_up() -> None:
    """A rank that lagged its peers by 0.40 of its power while the job started (as
    nanoGPT's rank 0 did) does not teach the model that a GPU may draw 0.40 less than
    its peers: the fit reads ``peer_power`` of each GPU's start-up
    (:func:`grace.start_up_mask`, stepped as the gate is) as unknown. The start-up's levels
    stay in the fit (its lower power is in the range), and so do its other peer features
    and every later window."""
    from watchdog.anomaly import train

    row = steady()[2]
    rng = np.random.default_rng(3)
    n = 400  # 10 s windows
    t = 1000.0 + 10.0 * np.arange(n)
    feats = np.repeat(row[None], n, axis=0)
    feats = feats + rng.normal(0.0, 0.01, feats.shape) * (np.abs(feats) > 0)
    feats[:, :, F.INDEX["own_temp"]] = np.nan  # the fit fills it
    feats[:, :, F.INDEX["temp_slope"]] = 0.0
    feats[:9, 0, F.INDEX["peer_power"]] = -0.40  # rank 0 at the start: 90 s
    feats[:9, 0, F.INDEX["power_frac"]] -= 0.40
    feats[:9, 1, F.INDEX["peer_util"]] = -30.0  # another rank's swings at the start
    feats[300, 2, F.INDEX["peer_power"]] = -0.25  # later: learned
    mask = grace.start_up_mask(t, feats)
    first = int(np.argmin(mask[:, 0]))
    assert L.WARM_MIN_S <= t[first] - t[0] <= L.GRACE_MAX_S
    assert mask[:first].all() and not mask[first:].any()
    model, _ = train.fit(feats, step=10.0, t=t, gpu_model="x", stride=10.0, min_windows=50)
    assert model.lo[F.INDEX["peer_power"]] == pytest.approx(-0.25, abs=0.01)
    assert model.lo[F.INDEX["power_frac"]] < row[0, F.INDEX["power_frac"]] - 0.3
    assert model.lo[F.INDEX["peer_util"]] == pytest.approx(-30.0, abs=0.1)

def test_a_node_busy_before_judging_begins_is_not_in_a_start_up() -> None:
    """``replay --model auto`` judges from the end of the part it fitted on, the agent
    from the fit it made while collecting: the gate follows the GPUs' transitions over
    the windows it does not judge (:meth:`Gate.observe`), so a node busy for half an
    hour is judged at once, not after a start-up's grace."""
    model = healthy_model()
    g, feats = sim_grid("sim:healthy", 60.0, seed=1)
    cut = g.t[0] + 30 * 60.0
    k = int(np.searchsorted(g.t, cut + 60.0))
    stage = AnomalyStage(model, "node", g.step, start=cut)
    stage.add_grid(F.rows(g, 0, k), feats[:k])
    stage.judge()
    assert all(st.seen and st.grace_from is None for st in stage.gate.gpus.values())
    waiting = AnomalyStage(None, "node", g.step)  # no model yet: the agent collecting
    waiting.add_grid(F.rows(g, 0, k), feats[:k])
    waiting.judge()
    assert all(st.seen and st.grace_from is None for st in waiting.gate.gpus.values())
