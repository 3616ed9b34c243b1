"""Phases and workload changes: a job back at what it did before, or doing something new.

* A GPU's power levels held for :data:`~.gate_limits.PHASE_MIN_S` or more and left are the
  phases of its job (:func:`hold`); a GPU working alone back at one of them is not judged
  for as long as that phase lasted (:func:`phase`).
* The normals learned so far (the fitted model's own first, then those re-learned after
  workload changes, :data:`~.gate_limits.NORMALS_KEPT` in all) are tried before a
  departure is taken for new work: a node back on a job it ran before (or out of a long
  checkpoint) is judged against that normal at once (:func:`known`).
* A workload change (:func:`change`): every GPU of the job settles and re-learns together
  (:mod:`.relearn`); its time and reason go to ``watchdog status`` and the log.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from watchdog.anomaly import features as F
from watchdog.anomaly import relearn
from watchdog.anomaly.gate_limits import (
    GRACE_MAX_S,
    NEVER_SHIFTED,
    PHASE_MIN_S,
    PHASE_SLACK_S,
    PHASE_TOL,
    WARM_MIN_S,
)
from watchdog.anomaly.gate_state import GateState, GpuState, Normal, Relearn
from watchdog.untyped import Array


def hold(st: GpuState, t: float, power: float) -> None:
    """A busy window's power: the level the GPU holds goes on, or a stay of
    :data:`~.gate_limits.PHASE_MIN_S` or more ends and is remembered as a phase of its job
    (idle windows, a checkpoint, do not end it)."""
    if st.stay is not None and abs(power - st.stay[0]) <= PHASE_TOL:
        return
    if st.stay is not None and t - st.stay[1] >= PHASE_MIN_S:
        st.phases.append((st.stay[0], t - st.stay[1]))
    st.stay = (power, t)


def phase(gs: GateState, t: float, uuids: Sequence[str], feats: Array,
          above: list[int]) -> set[str]:
    """GPUs working alone, over the threshold at a power level their job held before
    (within :data:`~.gate_limits.PHASE_TOL`, for :data:`~.gate_limits.PHASE_MIN_S` or more)
    and left, for no longer than the longest such stay plus
    :data:`~.gate_limits.PHASE_SLACK_S`, whose furthest feature out of the training range
    is a level of the work (not health or physics): a phase of the job, not judged.

    Why: alone, a job switching between a heavy and a light phase at the same utilization
    and memory looks like a power fault on each switch, and the re-learning saw one phase
    (a 1-GPU node of the job stream at 0.92 and 0.61 of the limit: 7 false "power 61 %
    (normal 48 %)"). A slowdown at such a level still pages once it lasts longer than the
    phase ever did; a drift shows in ``own_temp`` and is judged at once."""
    out = set()
    for g in above:
        st = gs.gpus[uuids[g]]
        far = relearn.over(gs.fitted, feats[g])
        if st.stay is None or far is None:
            continue
        level, since = st.stay
        held = [d for p, d in st.phases if abs(p - level) <= PHASE_TOL]
        if not held or t - since > max(held) + PHASE_SLACK_S:
            continue
        if F.FEATURES[int(np.argmax(far))] not in NEVER_SHIFTED:
            out.add(uuids[g])
    return out


def known(gs: GateState, uuids: Sequence[str], raw: Array, judged: list[int]
          ) -> tuple[Array, Array] | None:
    """Features and scores under another known normal when most of ``judged`` fall below
    there (it becomes the current one): of those, the one under which most fall below,
    then the lowest scores.

    Why the best and not the first: a normal learned before one GPU's own re-allocation fits
    the others as well as a later one, but holds that GPU's old memory; taken first, it
    paged "memory used 40% (normal 66%)" at the job's next power phase (a 4-GPU node of the
    job stream). And the GPUs over the threshold under it take the median memory offset of
    those under it, where that brings them under (a normal learned on a job that held two
    GPUs' memory differently paged "memory used 50% (normal 88%)" on both); only memory:
    taking all of the peers' offsets gave the node's hot GPU its peers' temperature offsets
    ("temperature 68 C (normal 42 C)"). A GPU that departs from its peers stays over."""
    thr = gs.fitted.threshold
    best: tuple[tuple[int, float], Normal, Array, Array] | None = None
    for normal in gs.normals:
        if normal is gs.current:
            continue
        f2, s2 = relearn.apply(gs, uuids, raw, None, normal)
        fit = sum(1 for g in judged if not s2[g] > thr)
        if 2 * fit > len(judged) or (len(judged) == 1 and fit == 1):
            rank = (fit, -float(np.nansum([s2[g] for g in judged])))
            if best is None or rank > best[0]:
                best = (rank, normal, f2, s2)
    if best is None:
        return None
    _rank, normal, f2, s2 = best
    out = [g for g in judged if s2[g] > thr]
    if out and len(out) < len(judged):
        # the GPUs that do not fit try the median memory offset of those that do: one
        # GPU's entry in a known normal can be older than its last re-allocation (only
        # memory: the other offsets are the GPU's own, its place in the airflow)
        zero = np.zeros(raw.shape[1])
        k = F.INDEX["mem_ratio"]
        peers = float(np.median([normal.get(uuids[g], zero)[k] for g in judged
                                 if g not in out]))
        tried = {}
        for g in out:
            off = normal.get(uuids[g], zero).copy()
            off[k] = peers
            tried[uuids[g]] = off
        _f, s3 = relearn.apply(gs, uuids, raw, None, {**normal, **tried})
        mine = {uuids[g]: tried[uuids[g]] for g in out if not s3[g] > thr}
        if mine:
            normal = {**normal, **mine}
            f2, s2 = relearn.apply(gs, uuids, raw, None, normal)
    gs.current = normal
    return f2, s2


def change(gs: GateState, t: float, gpus: set[str], why: str) -> None:
    """The workload of ``gpus`` changed at ``t`` (``why``: in words): they, every GPU of
    the job (working or holding memory) and those that started work with them settle and
    re-learn together (:mod:`.relearn`), departed or not yet; another change while one
    settles joins it, from now."""
    gs.workload_changed_at, gs.workload_change = t, why
    gpus = gpus | {u for u, st in gs.gpus.items() if st.after_gap} | set(gs.members)
    gpus |= gs.settling()
    relearn.end(gs)
    gs.relearn = Relearn(t)
    for u in gpus:
        gs.gpus[u].new_work(t)
        gs.gpus[u].settling = True
    gs.consensus = 0
    gs.events.append((t, f"the workload changed: {why}; not judged while it settles "
                         f"({WARM_MIN_S:.0f}-{GRACE_MAX_S:.0f} s), then judged against "
                         "its new normal"))
