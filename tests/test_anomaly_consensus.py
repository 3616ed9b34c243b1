"""Node-wide consensus and a GPU's own evidence (:mod:`watchdog.anomaly.consensus`): a
departure the job's GPUs share, and a GPU whose own work changed, are no fault."""

from __future__ import annotations

import numpy as np
from gate_helpers import (
    steady,
    walk,
)

from watchdog.anomaly import consensus
from watchdog.anomaly import features as F
from watchdog.anomaly import gate_limits as L
from watchdog.anomaly.gate import Gate
from watchdog.anomaly.gate_state import GpuState


def test_a_level_every_gpu_of_the_job_shares_is_not_one_gpus_departure() -> None:
    """With peers at work, a GPU over the threshold whose furthest feature out of range is
    a level (power) while its peer features lie inside the range moves with its job
    (a phase its peers reached a window later); one away from its peers is judged."""
    model, uuids, row = steady()
    gate = Gate(model)
    k = F.INDEX["power_frac"]
    x = row.copy()
    x[:, k] = float(model.hi[k]) + 0.3  # the whole job at a heavier phase
    assert consensus.with_peers(gate.state, uuids, x, [0]) == {uuids[0]}
    # its temperature follows the shared power step at its own rate: still the job's
    x[0, F.INDEX["peer_temp_drift"]] = float(model.hi[F.INDEX["peer_temp_drift"]]) + 3.0
    assert consensus.with_peers(gate.state, uuids, x, [0]) == {uuids[0]}
    x[0, F.INDEX["peer_power"]] = float(model.hi[F.INDEX["peer_power"]]) + 0.3
    assert consensus.with_peers(gate.state, uuids, x, [0]) == set()  # away from its peers: judged
    z = row.copy()  # warmer than its peers with its power in range: judged
    z[0, F.INDEX["temp_mean"]] = float(model.hi[F.INDEX["temp_mean"]]) + 10.0
    z[0, F.INDEX["peer_temp"]] = float(model.hi[F.INDEX["peer_temp"]]) + 0.5
    assert consensus.with_peers(gate.state, uuids, z, [0]) == set()
    y = row.copy()  # a health feature furthest out (the HBM clock): judged
    y[0, F.INDEX["mem_clock_frac"]] = float(model.lo[F.INDEX["mem_clock_frac"]]) - 0.2
    assert consensus.with_peers(gate.state, uuids, y, [0]) == set()

def test_a_log_without_memory_gets_a_reference_and_its_departures_are_judged() -> None:
    """A log without a memory column (the nanoGPT logs): the GPU's reference keeps
    memory NaN and follows the rest, so its first normal windows end its "new work after
    an idle gap" and a later departure at the same utilization is judged, not taken for
    a new job (before, the NaN stuck in the reference kept every GPU "after a gap" for
    good and every departure of a GPU alone was a workload change)."""
    model, uuids, row = steady()
    row = row.copy()
    row[:, F.INDEX["mem_ratio"]] = np.nan
    gate = Gate(model)
    times = [float(10 * i) for i in range(60)]
    walk(gate, [(t, row, set()) for t in times])
    st = gate.gpus[uuids[0]]
    assert st.ref is not None and np.isnan(st.ref[1]) and not np.isnan(st.ref[0])
    assert not st.after_gap
    assert not consensus.has_evidence(gate.state, uuids[0], row[0], alone=True)
    moved = row[0].copy()
    moved[F.INDEX["util_mean"]] -= 40.0  # its utilization did move: a new job
    assert consensus.has_evidence(gate.state, uuids[0], moved, alone=True)

def test_memory_used_moved_by_a_few_percent_of_the_gpu_is_a_new_job() -> None:
    """A new job (or batch) re-allocates: memory used moved by more than 3 % of the
    GPU's memory is evidence of a new job (5 % let a 1-GPU job at 93 % after one at
    88 % page as a slowdown: 2 false anomalies on the week's a100 1-GPU node of seed 7);
    a point or two is the same job's allocator."""
    model, uuids, row = steady()
    gate = Gate(model)
    walk(gate, [(float(10 * i), row, set()) for i in range(60)])
    ref = gate.gpus[uuids[0]].ref
    assert ref is not None
    for step, moved in ((0.02, False), (0.04, True), (-0.04, True)):
        x = row[0].copy()
        x[F.INDEX["mem_ratio"]] = ref[1] + step
        assert consensus.has_evidence(gate.state, uuids[0], x) is moved, step

def test_memory_or_utilization_moved_within_its_own_swing_is_the_same_job() -> None:
    """The evidence of a new job is a move beyond MEM_STEP / UTIL_STEP and beyond
    SPREAD_K times the level's usual distance from the GPU's normal: W&B's 30 s means of
    a real FSDP job's memory used swing between 85 and 100 % of the GPU (ghln1e4f), and
    a GPU that lost a third of its power was taken for a new job every other window."""
    model, uuids, row = steady()
    mr = F.INDEX["mem_ratio"]
    gate = Gate(model)
    u = uuids[0]
    gate.gpus[u] = GpuState()
    for m in [0.90, 0.96] * 30:  # windows judged normal, one by one
        x = row[0].copy()
        x[mr] = m
        consensus.remember(gate.state, u, x)
    st = gate.gpus[u]
    assert st.ref is not None and 0.02 < st.spread[1] < 0.04
    x = row[0].copy()
    x[mr] = st.ref[1] - 2 * L.MEM_STEP  # twice MEM_STEP, inside its own swing
    assert not consensus.moved_from(st, x)[1]
    edge = max(L.MEM_STEP, L.SPREAD_K * st.spread[1])
    for off, moved in ((edge - 0.005, False), (edge + 0.005, True)):
        x = row[0].copy()
        x[mr] = st.ref[1] - off
        assert consensus.moved_from(st, x)[1] is moved, off
    gate.gpus["steady"] = GpuState()  # a steady level: MEM_STEP alone
    for _ in range(60):
        consensus.remember(gate.state, "steady", row[0])
    quiet = gate.gpus["steady"]
    assert quiet.ref is not None and quiet.spread[1] < 1e-6
    for off, moved in ((L.MEM_STEP - 0.002, False), (L.MEM_STEP + 0.002, True)):
        x = row[0].copy()
        x[mr] = quiet.ref[1] + off
        assert consensus.moved_from(quiet, x)[1] is moved, off
