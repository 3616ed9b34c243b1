"""A GPU alone slowing down: ``own_power``, its power against its own past at the same work.

With peers, a GPU that slows down falls away from them (``peer_power``). Without (a 1-GPU
node, a job on one GPU, a job on two: :data:`~.gate_limits.PEERS_MIN`), every other
feature can read normal: on a 1-GPU node whose first
job ran a heavy phase (0.85 of the limit) and a light one (0.47), a second job's heavy
phase (0.79) slowed to 65 % draws 0.51, inside the training's range, at the utilization,
memory and clocks of the work, and the forest scored it 0.45 under a threshold of 0.83 for
25 minutes. What tells it from the job's own lighter phase is the activity: the lighter
phase moves less memory traffic and fewer tensor ops.

So a GPU working alone remembers, per activity of its current work
(:data:`~.gate_limits.ACTIVITY`: utilization, memory used, memory-controller and GPM
activity, each within its tolerance; :func:`nearest`), the most power it drew there and the
mean and spread of its judged-normal windows (:func:`learn_work`); drawing
:data:`~.gate_limits.SLOW_FALL` of its limit and :data:`~.gate_limits.SLOW_FRAC` of that
power less than the most, and :data:`~.gate_limits.SLOW_NOISE_K` spreads under the mean, it
is slowing down (:func:`slowed`: ``own_power`` set, judged, never a workload change). Its
work ends at a warm-up, a workload change, or an idle spell in which it released its
memory (:meth:`.gate_state.GpuState.new_work`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import (
    ACTIVE,
    ACTIVITY,
    ACTIVITY_ALPHA,
    PEERS_MIN,
    SAME_ACTIVITY_REACH,
    SLOW_FALL,
    SLOW_FRAC,
    SLOW_NOISE_K,
)
from watchdog.anomaly.gate_state import GateState, GpuState, Work
from watchdog.anomaly.job import jobs_of
from watchdog.untyped import Array

ACT_AT = np.array([F.INDEX[a] for a in ACTIVITY])
ACT_TOL = np.array(list(ACTIVITY.values()))
ACT_ACTIVE = np.array([a in ACTIVE for a in ACTIVITY])


def slowed(gs: GateState, uuids: Sequence[str], raw: Array, busy: Array,
           engaged: set[str] | frozenset[str]) -> Array:
    """``raw`` with ``own_power`` (the fall, of its limit) set where a GPU at work without
    peers is slowing down (see the module docs; not while its job settles): the one GPU
    at work on the node, or one of a job with two to fewer than
    :data:`~.gate_limits.PEERS_MIN` GPUs at work (:func:`.job.jobs_of`). Not a GPU the
    memory it holds sets apart from others at work: another job's, or its job's rank 0
    holding less (real-wandb TRAVEL: 92 % beside three at 98.5 %), whose phases it would
    take for a slowdown. A copy where it is set."""
    workers = [g for g, u in enumerate(uuids) if busy[g] and u not in engaged]
    if not workers:
        return raw
    if len(workers) > 1:
        _member, jobs = jobs_of(raw, busy)
        peers = (jobs & busy[None, :]).sum(axis=1)
        workers = [g for g in workers if 2 <= peers[g] < PEERS_MIN]
    out = raw
    for g in workers:
        fall = _fall(gs, uuids[g], raw[g])
        if fall is not None:
            out = raw.copy() if out is raw else out
            out[g, F.INDEX["own_power"]] = fall
    return out


def _fall(gs: GateState, u: str, row: Array) -> float | None:
    """How far (of its limit, negative) a GPU at work without peers has fallen below the
    most it drew at its activity, where it is slowing down; None where it is not."""
    if gs.relearn is not None and gs.gpus[u].settling:
        return None
    power = float(row[F.INDEX["power_frac"]])
    work = works_at(gs.gpus[u], row)
    if work is None or math.isnan(power):
        return None
    most = work.most
    fall = power - most
    if (fall > -SLOW_FALL or power > (1.0 - SLOW_FRAC) * most
            or power > work.mean - SLOW_NOISE_K * math.sqrt(work.var)):
        return None
    return fall


def works_at(st: GpuState, row: Array) -> Work | None:
    """What the GPU drew at ``row``'s activity in its current work (:func:`nearest`);
    None where no such activity is remembered."""
    k = nearest(st.works, row)
    return None if k is None else st.works[k]


def learn_work(st: GpuState, row: Array, judged: bool = False) -> None:
    """A normal window's activity and power: the most drawn at that activity so far (a
    window part-way into a slowdown never lowers it), or a new activity where none lies
    within :data:`~.gate_limits.SAME_ACTIVITY_REACH` of the tolerances (a job's ramp into
    its phase would otherwise hold the steady level in an activity learned on the way).
    ``judged``: a window judged normal one by one (not the job's first and settled windows
    taken in at a re-learning, which may hold a fall): it also moves the activity's mean
    and spread of power."""
    power = float(row[F.INDEX["power_frac"]])
    if math.isnan(power) or not math.isnan(row[F.INDEX["own_power"]]):
        return
    k = nearest(st.works, row, SAME_ACTIVITY_REACH)
    if k is not None:
        w = st.works[k]
        w.most = max(w.most, power)
        if judged:
            d = power - w.mean
            w.mean += ACTIVITY_ALPHA * d
            w.var = (1.0 - ACTIVITY_ALPHA) * (w.var + ACTIVITY_ALPHA * d * d)
    elif (~np.isnan(row[ACT_AT]) & ACT_ACTIVE).any():  # one of ACTIVE read
        st.works.append(Work(row[ACT_AT].copy(), power, power))


def nearest(works: Sequence[Work], row: Array, reach: float = 1.0) -> int | None:
    """Of remembered activities ``works``, the index of the nearest to ``row``'s whose every
    level lies within ``reach`` of its tolerance, one of :data:`~.gate_limits.ACTIVE` read
    in both (a level unread in either left out); None where there is none. Distance: the
    largest level's, in tolerances."""
    if not works:
        return None
    d = np.abs(row[ACT_AT] - np.stack([w.act for w in works])) / ACT_TOL  # (W, A)
    read = ~np.isnan(d)
    ok = (read & ACT_ACTIVE).any(axis=1) & ~(np.where(read, d, 0.0) > reach).any(axis=1)
    if not ok.any():
        return None
    far = np.where(ok, np.where(read, d, 0.0).max(axis=1), np.inf)
    return int(np.argmin(far))
