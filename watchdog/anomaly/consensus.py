"""Node-wide consensus: a job moves every GPU of the node together, a fault moves one.

* With two or more busy GPUs, more than half of them over the threshold in one window (2
  of 2, 3 of 4, 5 of 8) pages nobody (:func:`node_departs`); held for
  :data:`~.gate_limits.CONSENSUS_WINDOWS` windows, or at once where a known normal fits,
  it is a **workload change**. A third of them moving together is held the same way.
* One GPU over the threshold whose own work changed (memory used or utilization moved
  from its normal beyond its own swing, :func:`moved_from`; a new process after an idle
  gap) is a job starting on it (:func:`moved`); held, a workload change of that GPU. **A
  power drop at unchanged utilization and memory is never one**: it is judged.
* With peers at work, a GPU over the threshold whose furthest feature out of range is a
  level of the work while its peer features lie inside the range moves with its job
  (:func:`with_peers`); one that does not stand out from the others' scores moves with
  the node (:func:`not_alone`); one furthest out in a throttle the rules name is theirs
  (:func:`throttled`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import alone, phases, relearn
from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import (
    CONSENSUS_WINDOWS,
    HEAVIER_PHASE,
    MEM_STEP,
    NEVER_SHIFTED,
    NORMAL_ALPHA,
    SPREAD_K,
    STAND_OUT_SCORE,
    THERMAL_PEERS,
    THROTTLE_FEATURES,
    UTIL_STEP,
)
from watchdog.anomaly.gate_state import GateState, GpuState
from watchdog.untyped import Array


def node_departs(gs: GateState, t: float, uuids: Sequence[str], raw: Array,
                 feats: Array, scores: Array, judged: list[int],
                 skip: set[str]) -> tuple[Array, Array, set[str]]:
    """More than half the busy GPUs over the threshold together: the workload. A known
    normal under which most of them fit is taken at once (:func:`phases.known`); else
    nobody is judged, and held, the node's workload changed."""
    alt = phases.known(gs, uuids, raw, judged)
    if alt is not None:
        return alt[0], alt[1], skip
    gs.consensus += 1
    skip |= {uuids[g] for g in judged}
    if gs.consensus >= CONSENSUS_WINDOWS:  # the first GPU whose own work changed says why
        g0 = next((g for g in judged if has_evidence(gs, uuids[g], raw[g])), None)
        why = (why_changed(gs.gpus[uuids[g0]], raw[g0]) if g0 is not None else
               "most busy GPUs left their normal together")
        phases.change(gs, t, {uuids[g] for g in judged}, f"{why} ({len(judged)} busy GPUs)")
    return feats, scores, skip


def moved(gs: GateState, t: float, uuids: Sequence[str], raw: Array, above: list[int],
          solo: bool = False) -> set[str]:
    """GPUs over the threshold whose own work changed (:func:`has_evidence`): a job
    started on them, not a fault; held :data:`~.gate_limits.CONSENSUS_WINDOWS` windows (the
    way into a checkpoint passes), it is a workload change of those GPUs. One GPU, the only
    one at work or one of many: a power drop at unchanged utilization and memory is judged."""
    out = set()
    for g in above:
        st = gs.gpus[uuids[g]]
        if not has_evidence(gs, uuids[g], raw[g], alone=len(raw) == 1 or solo):
            st.moved = 0
            continue
        out.add(uuids[g])
        st.moved += 1
        if st.moved >= CONSENSUS_WINDOWS:
            st.moved = 0
            phases.change(gs, t, {uuids[g]}, why_changed(st, raw[g]) + f" (GPU {g})")
    return out


def not_alone(uuids: Sequence[str], scores: Array, judged: list[int],
              above: list[int]) -> set[str]:
    """GPUs over the threshold that do not stand out from the others at work (their score
    less than :data:`~.gate_limits.STAND_OUT_SCORE` over the others' median): the node is
    moving as a whole (a long checkpoint, a new phase), each GPU crossing at its own
    moment; a fault lifts one GPU's score well clear of its peers'."""
    out = set()
    for g in above:
        others = [scores[h] for h in judged if h != g and not np.isnan(scores[h])]
        if others and scores[g] - float(np.median(others)) < STAND_OUT_SCORE:
            out.add(uuids[g])
    return out


def throttled(gs: GateState, uuids: Sequence[str], feats: Array, above: list[int]
              ) -> set[str]:
    """GPUs over the threshold because of a clock-event reason the model never saw
    (furthest outside the training range: time at the power cap, in thermal or HW
    slowdown, locked clocks): a named throttle, which the rules judge
    (``rules/throttle.yaml``), not an unnamed fault."""
    out = set()
    for g in above:
        far = relearn.over(gs.fitted, feats[g])
        if far is None:
            break
        k = int(np.argmax(far))
        if far[k] > 0 and F.FEATURES[k] in THROTTLE_FEATURES:
            out.add(uuids[g])
    return out


def with_peers(gs: GateState, uuids: Sequence[str], feats: Array, above: list[int]
               ) -> set[str]:
    """GPUs over the threshold (with peers at work) whose departure their peers share: the
    feature furthest outside the training range is a level of the work (power,
    temperature and their trends, utilization, memory: not a peer feature, not one of
    :data:`~.gate_limits.NEVER_SHIFTED`) while every peer feature lies inside it.

    Why: the GPUs of a job change power phase together, but only more than half of them
    over the threshold at once is a node-wide departure; on a job of 2 GPUs one of them
    crossing while the other stays just under paged as "power does not match the work" at
    a new job's heavier phase (8 of the 20 false anomalies left on the 2- and 4-GPU nodes
    of the job stream). A fault on one GPU moves it away from its peers or shows in a
    health feature (``own_temp``, ``sm_clock_unexplained``, the HBM clock): judged."""
    out = set()
    for g in above:
        far = relearn.over(gs.fitted, feats[g])
        if far is None:
            break
        k = int(np.argmax(far))
        name = F.FEATURES[k]
        if far[k] <= 0 or name.startswith("peer_") or name in NEVER_SHIFTED:
            continue
        # a power step its peers share: their temperatures follow it each at its own rate
        # (its own thermal line), so the thermal peer features move for a while
        ignore = THERMAL_PEERS if name in ("power_frac", "power_slope") else ()
        if not any(far[F.INDEX[p]] > 0 for p in F.FEATURES
                   if p.startswith("peer_") and p not in ignore):
            out.add(uuids[g])
    return out


def moved_from(st: GpuState, row: Array) -> tuple[bool, bool]:
    """Whether ``row``'s utilization and memory used moved from the GPU's normal: by more
    than :data:`~.gate_limits.UTIL_STEP` / :data:`~.gate_limits.MEM_STEP`, and by more
    than :data:`~.gate_limits.SPREAD_K` times their usual distance from it (a job's own
    swing)."""
    assert st.ref is not None
    util, mem = row[F.INDEX["util_mean"]], row[F.INDEX["mem_ratio"]]
    return (bool(abs(util - st.ref[0]) > max(UTIL_STEP, SPREAD_K * st.spread[0])),
            bool(abs(mem - st.ref[1]) > max(MEM_STEP, SPREAD_K * st.spread[1])))


def has_evidence(gs: GateState, u: str, row: Array, alone: bool = False) -> bool:
    """Whether the GPU's work changed, not only its power: memory used or utilization
    moved from its normal (:func:`moved_from`), or (``alone``: the only GPU at work, no
    peers to compare with) it runs a process that started after an idle gap. A GPU that
    started with its peers is judged against them instead: a fault present from its first
    minutes stands out there. Its power up by :data:`~.gate_limits.HEAVIER_PHASE` is a
    heavier phase, a new workload, unless it draws less than it drew at the same activity
    in its work (``own_power`` set): a slowdown, whose heavier phase is no new job."""
    st = gs.gpus[u]
    if st.ref is None:
        return st.after_gap and alone
    power = row[F.INDEX["power_frac"]]
    slowed = not math.isnan(row[F.INDEX["own_power"]])
    harder = alone and not slowed and power - st.ref[2] > HEAVIER_PHASE
    moved_util, moved_mem = moved_from(st, row)
    return bool(moved_mem or moved_util or (st.after_gap and alone) or harder)


def why_changed(st: GpuState, row: Array) -> str:
    """A workload change's reason in words, for the log and ``watchdog status``."""
    util, mem = row[F.INDEX["util_mean"]], row[F.INDEX["mem_ratio"]]
    moved_util, moved_mem = moved_from(st, row) if st.ref is not None else (False, False)
    if st.ref is not None and moved_mem:
        return f"memory used {st.ref[1]:.0%} -> {mem:.0%}"
    if st.ref is not None and moved_util:
        return f"utilization {st.ref[0]:.0f}% -> {util:.0f}%"
    if st.after_gap:
        return "new work after an idle gap"
    if st.ref is not None and row[F.INDEX["power_frac"]] - st.ref[2] > HEAVIER_PHASE:
        return (f"power {st.ref[2]:.0%} -> {row[F.INDEX['power_frac']]:.0%} of its limit "
                "at the same work (a heavier phase)")
    return "most busy GPUs left their normal together"


def remember(gs: GateState, u: str, row: Array) -> None:
    """A judged, normal window: the GPU's reference (util, memory, power) and its usual
    distance from it follow it (:data:`~.gate_limits.NORMAL_ALPHA`), and so does the
    power it drew at its activity (:func:`.alone.learn_work`). A metric the log lacks stays
    NaN (a log without memory: no evidence from it); one that comes and goes keeps its last
    level."""
    st = gs.gpus[u]
    alone.learn_work(st, row, judged=True)
    util, mem = float(row[F.INDEX["util_mean"]]), float(row[F.INDEX["mem_ratio"]])
    power = float(row[F.INDEX["power_frac"]])
    st.after_gap = False
    if st.ref is None:
        st.ref = (util, mem, power)
        return
    a = NORMAL_ALPHA
    r_util, r_mem, r_power = st.ref
    s_util, s_mem = st.spread
    d_util, d_mem = abs(util - r_util), abs(mem - r_mem)
    st.spread = (s_util if math.isnan(d_util) else (1 - a) * s_util + a * d_util,
                 s_mem if math.isnan(d_mem) else (1 - a) * s_mem + a * d_mem)
    st.ref = (_follow(r_util, util, a), _follow(r_mem, mem, a), _follow(r_power, power, a))


def _follow(ref: float, now: float, a: float) -> float:
    """``ref`` moved a share ``a`` towards ``now``; NaN on either side keeps the other."""
    if math.isnan(ref):
        return now
    if math.isnan(now):
        return ref
    return (1 - a) * ref + a * now
