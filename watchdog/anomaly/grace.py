"""Grace: when a busy GPU is not judged (start-up, warm-up, checkpoints, recovery, lag).

A GPU is not judged:

* after **start-up** (its first busy window) or a warm-up after an **idle gap** of
  :data:`~.gate_limits.IDLE_GAP_S` or more (the job ended, the agent was down, the log
  has a hole): at least :data:`~.gate_limits.WARM_MIN_S` and until its temperature has
  settled (``|temp_slope| <=`` :data:`~.gate_limits.SETTLED_C_PER_MIN`), at most
  :data:`~.gate_limits.GRACE_MAX_S`;
* for :data:`~.gate_limits.CKPT_GRACE_S` after a shorter idle spell (a checkpoint: the
  GPU paused or wrote). Fixed, not "until settled", so a fault that starts 10 s after a
  60 s checkpoint pages within 120 s of its start;
* for the recovery after a rule's engagement ends: as after start-up, from
  :data:`~.gate_limits.RECOVERY_MIN_S`.

And a GPU whose power stepped by :data:`~.gate_limits.LAG_STEP` in the last
:data:`~.gate_limits.LAG_S` with its temperature moving the same way, or one settling back
towards its own thermal line, is judged without its temperature and trend
(:data:`~.gate_limits.LAG_FEATURES`, read as normal): they follow the power at the GPU's
own time constant (:func:`lag`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import baseline, job, phases
from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import (
    CKPT_GRACE_S,
    GRACE_MAX_S,
    IDLE_GAP_S,
    LAG_C_PER_MIN,
    LAG_FEATURES,
    LAG_S,
    LAG_STEP,
    MEMBER_MEM,
    RECOVERY_MIN_S,
    SETTLED_C_PER_MIN,
    START_UP,
    WARM_MIN_S,
)
from watchdog.anomaly.gate_state import GateState, GpuState
from watchdog.untyped import Array


def transit(gs: GateState, t: float, uuids: Sequence[str], feats: Array,
            busy: Array, engaged: set[str] | frozenset[str]
            ) -> tuple[Array, set[str], set[str]]:
    """One window's transitions: each GPU's grace and phase bookkeeping, then the window
    with the peers taken among the job's GPUs (:func:`job.adjust`); returns it, the GPUs
    of a job waiting in a checkpoint, and the busy GPUs in a grace."""
    gap = gs.last_t is not None and t - gs.last_t >= IDLE_GAP_S
    gs.last_t = t
    pf = feats[:, F.INDEX["power_frac"]]
    mem = feats[:, F.INDEX["mem_ratio"]]
    for g, u in enumerate(uuids):
        transitions(gs.gpu(u), t, bool(busy[g]), u in engaged, gap,
                    freed=not busy[g] and bool(mem[g] < MEMBER_MEM))
        if not math.isnan(pf[g]):
            gs.gpus[u].powers.append((t, float(pf[g])))
            if busy[g]:
                phases.hold(gs.gpus[u], t, float(pf[g]))
    raw, pausing = job.adjust(gs, t, uuids, feats, busy)
    grace = {u for g, u in enumerate(uuids)
             if busy[g] and u not in engaged and in_grace(gs.gpus[u], t, raw[g])}
    return raw, pausing, grace


def transitions(st: GpuState, t: float, busy: bool, engaged: bool, gap: bool,
                freed: bool = False) -> None:
    """One GPU's transitions at ``t`` (``gap``: the data stopped for an idle gap before
    this window; ``freed``: idle with its memory released)."""
    st.freed = st.freed or freed
    if gap and st.idle_since is None:  # the data stopped: an idle spell since then
        st.idle_since = t - IDLE_GAP_S
    if engaged:
        st.engaged = True
        return
    if st.engaged:
        st.engaged = False
        if busy:
            begin(st, t, RECOVERY_MIN_S, "recovery after a rule's incident")
    if not busy:
        if st.idle_since is None:
            st.idle_since = t
        return
    if not st.seen:
        st.seen = True
        st.after_gap = True
        begin(st, t, WARM_MIN_S, START_UP)
    elif st.idle_since is not None:
        if t - st.idle_since >= IDLE_GAP_S:
            st.after_gap = True
            begin(st, t, WARM_MIN_S, "warm-up after an idle gap")
        else:
            begin(st, t, CKPT_GRACE_S, "after a checkpoint", fixed=True)
        if st.freed:  # its process ended (a checkpoint holds its memory): new work
            st.new_work(t)
    st.idle_since, st.freed = None, False


def begin(st: GpuState, t: float, minimum: float, why: str, fixed: bool = False) -> None:
    """A grace from ``t`` of at least ``minimum`` s (``fixed``: exactly that long); a grace
    that is not a checkpoint's begins new work (:meth:`GpuState.new_work`)."""
    st.grace_from, st.grace_min, st.grace_fixed, st.grace_why = t, minimum, fixed, why
    if not fixed:
        st.new_work(t)


def in_grace(st: GpuState, t: float, row: Array) -> bool:
    """Whether the GPU is still in its grace at ``t`` (``row``: its window); a grace that
    ended is forgotten."""
    if st.grace_from is None:
        return False
    age = t - st.grace_from
    slope = row[F.INDEX["temp_slope"]]
    settled = math.isnan(slope) or abs(slope) <= SETTLED_C_PER_MIN
    if age < st.grace_min or (not st.grace_fixed and not settled and age < GRACE_MAX_S):
        return True
    st.grace_from = None
    return False


def lag(gs: GateState, t: float, uuids: Sequence[str], raw: Array) -> Array:
    """``raw`` with :data:`~.gate_limits.LAG_FEATURES` read as normal (NaN) on the GPUs
    :func:`lagging` (a copy where any is; the transitions and the re-learning keep the
    real trend: they ask whether the GPU has settled)."""
    out_of_step = lagging(gs, t, uuids, raw)
    if not out_of_step.any():
        return raw
    out = raw.copy()
    out[np.ix_(out_of_step, np.array([F.INDEX[f] for f in LAG_FEATURES]))] = np.nan
    return out


def lagging(gs: GateState, t: float, uuids: Sequence[str], feats: Array) -> Array:
    """``(G,)``: GPUs whose temperature follows a recent power step, or settles back towards
    their own thermal line (:func:`baseline.lagging`): physics, read as normal. A job whose
    power steps are larger than the fit's first job's (0.47 -> 0.83 of the limit on a GPU
    fitted at 0.41: +7.8 C/min, beyond every trend the fit saw) paged "temperature trend
    +7.8 C/min" at every switch (28 false anomalies on one 1-GPU node of the job stream).
    A fault moves a GPU away from its line, never back towards it; the power fault itself
    still shows in the power features."""
    out = np.zeros(len(uuids), bool)
    pf = feats[:, F.INDEX["power_frac"]]
    slope = feats[:, F.INDEX["temp_slope"]]
    for g, u in enumerate(uuids):  # its power stepped lately, its temperature follows
        if math.isnan(pf[g]):
            continue
        old = next((p for tt, p in gs.gpus[u].powers if t - tt <= LAG_S), None)
        step = pf[g] - old if old is not None else 0.0
        out[g] = (abs(step) >= LAG_STEP and step * slope[g] > 0
                  and abs(slope[g]) >= LAG_C_PER_MIN)
    coef, known = gs.fitted.base_coef, gs.fitted.base_uuids
    if coef is not None and len(known):
        out |= baseline.lagging(feats, baseline.lines_for(uuids, known, coef))
    return out


def start_up_mask(t: Array, feats: Array, every: int = 1) -> Array:
    """``(T, G)`` bool: the windows of each GPU's start-up grace (its first busy window
    on, :data:`~.gate_limits.WARM_MIN_S` and until settled, at most
    :data:`~.gate_limits.GRACE_MAX_S`), found by the gate's own transitions stepped every
    ``every`` ticks (the others False)."""
    gs = GateState(None)
    n, g = feats.shape[:2]
    uuids = [str(k) for k in range(g)]
    out = np.zeros((n, g), dtype=bool)
    busy = F.valid_rows(feats)
    for i in range(0, n, max(1, every)):
        _, _, grace = transit(gs, float(t[i]), uuids, feats[i], busy[i], set())
        if grace:
            out[i] = [u in grace and gs.gpus[u].grace_why == START_UP for u in uuids]
        elif all(st.seen and st.grace_from is None for st in gs.gpus.values()):
            break  # every GPU past its start-up
    return out
