"""Re-learning: after a workload change, the node's new normal as offsets from the fit's.

On a workload change (:func:`.phases.change`) every GPU of the job is not judged while the
node settles (at least :data:`~.gate_limits.WARM_MIN_S`, then until the GPUs' median
temperature trend is within :data:`~.gate_limits.RELEARN_C_PER_MIN`, at most
:data:`~.gate_limits.GRACE_MAX_S`); then the model re-learns from the settled windows (up
to :data:`~.gate_limits.SETTLE_WINDOWS` of each GPU, outside any grace or checkpoint, at
least :data:`~.gate_limits.MIN_SETTLE_WINDOWS`, :func:`collect`): the first of (1) a known
normal and (2) the features whose settled level lies outside the training range moved back
to the training median (never :data:`~.gate_limits.NEVER_SHIFTED`: physics and health)
under which the settled windows lie inside the range and score under the fit's in-sample
quantile (:func:`fits`) becomes the GPU's normal (else (2) all the same: the node stays
unsettled, and the consensus keeps it from paging). Its offsets are subtracted before every
later scoring (:func:`apply`), only where the raw level lies further from the training
range than the shifted one (:func:`nearer`).

Why offsets and not a refit: a refit needs an hour of busy time, and a GPU that fails 10
minutes into a new job must still page; a shift keeps what the forest learned (both power
phases, the peers, each GPU's own thermal line) and moves only the levels the new job set.
What it cannot see: a fault already present while the node settles is learned as that
GPU's normal where it moved a level the new job moves too, except a GPU whose power fell
from its peers' at unchanged work after the job's first busy windows: its normal is its
place before the fall (:func:`falls`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from watchdog.anomaly import alone
from watchdog.anomaly import features as F
from watchdog.anomaly.gate_limits import (
    GRACE_MAX_S,
    LAG_FEATURES,
    MEM_STEP,
    MIN_SETTLE_WINDOWS,
    NEVER_SHIFTED,
    NORMALS_KEPT,
    RELEARN_C_PER_MIN,
    RELEARN_FIT_SHARE,
    RELEARN_GIVE_UP_S,
    SETTLE_FALL,
    SETTLE_WINDOWS,
    UTIL_STEP,
    WARM_MIN_S,
)
from watchdog.anomaly.gate_state import GateState, Normal
from watchdog.untyped import Array

if TYPE_CHECKING:
    from watchdog.anomaly.model import Model

# the features an offset may move (never :data:`~.gate_limits.NEVER_SHIFTED`)
SHIFTABLE = np.array([f not in NEVER_SHIFTED for f in F.FEATURES])


def collect(gs: GateState, t: float, uuids: Sequence[str], raw: Array,
            judged: list[int], working: list[int]) -> None:
    """One window of a change under way: each settling GPU's first busy windows and last
    ones (``working``: power does not lag, so what it drew from the job's first busy
    windows on is what a fall is measured from) and its steady ones (``judged``: no grace,
    no checkpoint); once the node has settled, :func:`learn`."""
    rl = gs.relearn
    assert rl is not None
    for g in working:
        st = gs.gpus[uuids[g]]
        if not st.settling:
            continue
        if st.early is None:
            st.early = []
        if len(st.early) < SETTLE_WINDOWS:
            st.early.append(raw[g])
        if st.last is None:
            st.last = deque(maxlen=SETTLE_WINDOWS)
        st.last.append(raw[g])
    slopes = []
    for g in judged:
        st = gs.gpus[uuids[g]]
        if st.settling:
            if st.steady is None:
                st.steady = deque(maxlen=SETTLE_WINDOWS)
            st.steady.append(raw[g])
            slopes.append(abs(raw[g][F.INDEX["temp_slope"]]))
    age = t - rl.since
    settled = not slopes or np.nanmedian(slopes) <= RELEARN_C_PER_MIN
    if age < WARM_MIN_S or (not settled and age < GRACE_MAX_S):
        return
    windows = [len(st.steady) for st in gs.gpus.values() if st.steady is not None]
    if min(windows, default=0) < MIN_SETTLE_WINDOWS:
        if age >= RELEARN_GIVE_UP_S:  # the GPUs went idle: nothing to learn, the old normal
            end(gs)
        return
    learn(gs, t)


def end(gs: GateState) -> None:
    """The change is over (learned, or given up): no GPU settles any more."""
    gs.relearn = None
    for st in gs.gpus.values():
        st.stop_settling()


def learn(gs: GateState, t: float) -> None:
    """The new normal from the settled windows (see the module docs)."""
    model = gs.fitted
    rows = {u: np.stack(list(st.steady)) for u, st in gs.gpus.items() if st.steady is not None}
    fell = falls(gs, t)
    pp = F.INDEX["peer_power"]
    for u, level in fell.items():  # the GPU as it was before it fell
        if u in rows:
            x = rows[u].copy()
        else:
            # never steady while the node settled (lagging its own fall): its last busy
            # windows, less their temperature. Without a normal of its own the old job's
            # memory made it a workload change of its own, re-learned with the fault in it
            last = gs.gpus[u].last
            assert last is not None
            x = np.stack(list(last))
            x[:, [F.INDEX[f] for f in LAG_FEATURES]] = np.nan
        x[:, pp] = level
        rows[u] = x
    lo, hi = model.lo, model.hi
    fill = model.fill
    shift: Normal = {}
    keep = ~SHIFTABLE
    for u, x in rows.items():
        with F._quiet():
            med = np.nanmedian(x, axis=0)
        med = np.where(np.isnan(med) | keep, fill, med)
        if lo is not None and hi is not None:
            shift[u] = np.where(((med < lo) | (med > hi)) & ~keep, med - fill, 0.0)
    merged = [({**n, **{u: n.get(u, np.zeros_like(fill)) for u in rows}}, "a known normal")
              for n in gs.normals]
    cands = [*merged, ({**gs.current, **shift}, "levels outside the training range "
                                                "moved back")]
    chosen, how = None, ""
    for normal, label in cands:
        if fits(gs, rows, normal):
            chosen, how = normal, label
            break
    if chosen is None:  # the new job's levels lie inside the range: shift those
        chosen, how = cands[-1][0], "levels outside the training range moved back " \
            "(its settled windows still score high: the node stays unsettled)"
    if not any(chosen is n for n in gs.normals):
        gs.normals = [gs.normals[0], chosen, *gs.normals[1:]][:NORMALS_KEPT]
    if fell:  # judged against the level it fell from, in the training range or not
        chosen = dict(chosen)
        for u, level in fell.items():
            chosen[u] = chosen.get(u, np.zeros_like(fill)).copy()
            chosen[u][pp] = level - fill[pp]
    gs.current = chosen
    for u, x in rows.items():  # the new job's utilization and memory are its normal
        with F._quiet():
            med = np.nanmedian(x, axis=0)
            dev = np.nanmean(np.abs(x - med), axis=0)
        st = gs.gpus[u]
        st.ref = (float(med[F.INDEX["util_mean"]]), float(med[F.INDEX["mem_ratio"]]),
                  float(med[F.INDEX["power_frac"]]))
        st.spread = (_zero_nan(dev[F.INDEX["util_mean"]]), _zero_nan(dev[F.INDEX["mem_ratio"]]))
        st.after_gap = False
    for u in fell:
        gs.gpus[u].fell = True
    # the power the job drew at each activity so far, from its first busy windows on
    # (power does not lag: a warming GPU draws what its work needs)
    for st in gs.gpus.values():
        if st.settling:
            for x in [*(st.early or ()), *(st.steady or ())]:
                alone.learn_work(st, x)
    end(gs)
    gs.events.append((t, f"the model judges the new workload from now: {how}"))


def _zero_nan(x: float) -> float:
    return 0.0 if math.isnan(x) else float(x)


def falls(gs: GateState, t: float) -> dict[str, float]:
    """GPUs whose power fell from their peers' while their job settled, at unchanged
    utilization and memory: ``{uuid: peer_power before the fall}``: ``peer_power`` in its
    last busy windows :data:`~.gate_limits.SETTLE_FALL` under its level in the job's first
    ones (warming or lagging included: power does not lag). A job moves every GPU
    together; one falling from its peers at the same work is failing, and learned as the
    job's normal it would be judged normal for as long as it lasts.

    Not alone (a 1-GPU node, a job on one GPU): there a job's lighter phase at the same
    utilization and memory within its first minutes is the same fall, and judged against
    the level before it, a 1-GPU node of the job stream paged 28 times ("power 42% of its
    limit (this job's normal 74%)"); alone, what it drew at the same activity judges it
    (:func:`.alone.slowed`). Nor a fault present from the job's first busy window."""
    out: dict[str, float] = {}
    early = {u: st for u, st in gs.gpus.items() if st.early is not None}
    if len(early) < 2:
        return out
    ut, mem = F.INDEX["util_mean"], F.INDEX["mem_ratio"]
    i = F.INDEX["peer_power"]
    for u, st in early.items():  # a GPU still lagging its fall has no steady rows
        first, late = st.early, st.last
        assert first is not None
        if len(first) < MIN_SETTLE_WINDOWS or not late:
            continue
        with F._quiet():
            e = np.nanmedian(np.stack(first), axis=0)
            n = np.nanmedian(np.stack(list(late)), axis=0)
        if abs(n[ut] - e[ut]) > UTIL_STEP or abs(n[mem] - e[mem]) > MEM_STEP:
            continue  # its work changed: a phase of the job, learned as it is
        if e[i] - n[i] >= SETTLE_FALL:
            out[u] = float(e[i])
            gs.events.append((t, f"{u}: power fell from {e[i]:+.0%} to {n[i]:+.0%} of its "
                                 "limit against its peers at unchanged work while its job "
                                 "settled: judged against its place before the fall"))
    return out


def fits(gs: GateState, rows: dict[str, Array], normal: Normal) -> bool:
    """Whether every GPU's settled windows, less ``normal``'s offsets, look like the
    training: their median inside the training range (the features that may shift) and at
    least :data:`~.gate_limits.RELEARN_FIT_SHARE` of them scoring under the fit's in-sample
    quantile (not merely under the threshold, which a level just outside the range can
    pass and the job's next phase then cross)."""
    model = gs.fitted
    lo, hi = model.lo, model.hi
    q = float(model.calibration.get("in_sample_q", model.threshold))
    may = SHIFTABLE
    for u, x in rows.items():
        off = normal.get(u)
        y = x - off if off is not None else x
        if lo is not None and hi is not None:
            with F._quiet():
                med = np.nanmedian(y, axis=0)
            if (((med < lo) | (med > hi)) & may & ~np.isnan(med)).any():
                return False
        s = score(model, y, F.valid_rows(x[None])[0])
        if np.mean(s <= q) < RELEARN_FIT_SHARE:
            return False
    return True


# --- offsets and the training range ----------------------------------------------------
def score(model: Model, x: Array, ok: Array) -> Array:
    """Scores of rows ``x`` (N, F) where ``ok`` (the raw windows' busy mask), NaN elsewhere."""
    s = np.full(len(x), np.nan)
    if ok.any():
        s[ok] = model.scores(x[ok])
    return s


def apply(gs: GateState, uuids: Sequence[str], raw: Array, scores: Array | None,
          normal: Normal) -> tuple[Array, Array]:
    """``raw`` less ``normal``'s offsets, and its scores (``scores``: those of ``raw``, kept
    when no offset applies)."""
    ok = F.valid_rows(raw[None])[0]
    if not normal or not any(u in normal for u in uuids):
        return raw, scores if scores is not None else score(gs.fitted, raw, ok)
    off = np.stack([normal.get(u, np.zeros(raw.shape[1])) for u in uuids])
    shifted = nearer(gs.fitted, raw, raw - off)
    if normal is gs.current:  # a fallen GPU is judged against where it fell from
        pp = F.INDEX["peer_power"]
        for g, u in enumerate(uuids):
            if u in gs.gpus and gs.gpus[u].fell:
                shifted[g, pp] = raw[g, pp] - off[g, pp]
    return shifted, score(gs.fitted, shifted, ok)


def nearer(model: Model, raw: Array, shifted: Array) -> Array:
    """Feature by feature, the raw level where it lies nearer the training range than the
    shifted one (inside it: distance 0), else the shifted level.

    Why: an offset is learned from the new job's settled windows, one phase of it. A job
    with two power phases whose high phase lay beyond the training range and whose low
    phase lies inside it was moved out of the range by the high phase's offset at every
    switch (``power 15% of its limit (normal 56%)`` on a GPU working alone: 145 false
    anomalies on one 1-GPU node of the job stream). A level the training knows needs no
    offset; a fault (power at 65 % of the high phase) lies outside the range either way."""
    lo, hi = model.lo, model.hi
    if lo is None or hi is None:
        return shifted
    with np.errstate(invalid="ignore"):
        d_raw = np.maximum(np.maximum(lo - raw, raw - hi), 0.0)
        d_sh = np.maximum(np.maximum(lo - shifted, shifted - hi), 0.0)
        return np.where(d_raw < d_sh, raw, shifted)


def over(model: Model, row: Array) -> Array | None:
    """``(F,)``: how far each feature of ``row`` lies outside the model's training range,
    in its units (negative inside; NaN read as the fill); None without a range. The
    furthest one names what a departure is made of."""
    lo, hi, unit = model.lo, model.hi, model.unit
    if lo is None or hi is None or unit is None:
        return None
    x = np.where(np.isnan(row), model.fill, row)
    return np.maximum(lo - x, x - hi) / unit


def inside(model: Model, row: Array) -> bool:
    """Whether the (shifted) window's levels that may shift lie inside the training range."""
    lo, hi = model.lo, model.hi
    if lo is None or hi is None:
        return True
    may = SHIFTABLE
    with np.errstate(invalid="ignore"):
        out = ((row < lo) | (row > hi)) & may & ~np.isnan(row)
    return not out.any()
