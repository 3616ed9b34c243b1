"""This module is long because one gate holds every decision about a window before the
runner's persistence (transitions, a job's GPUs and checkpoints, node-wide departures,
re-learning), and they share its per-GPU state: split, each part would need all of it.

Transitions and workload changes: when the model does not judge, and what it re-learns.

The model learns one node's normal work. A real node changes jobs several times a day,
restarts, sits in checkpoints and warms up after them; none of that is a fault, and the
scoring stage (:mod:`watchdog.anomaly.stage`) asks this module, window by window, which
GPUs to judge and against which normal. It sees only what the stage judges (each
window's features, the model's scores, the GPUs a rule holds), in data-time order, so
replay and the live agent take the same decisions (``tests/test_anomaly_stage.py``).

**Transitions (grace).** A GPU is not judged:

* after **start-up** (the first window of a GPU) or a warm-up after an **idle gap** of
  :data:`IDLE_GAP_S` (5 min) or more (no busy window: the job ended, the agent was
  down, the log has a hole): at least :data:`WARM_MIN_S` and until its temperature has
  settled (``|temp_slope| <=`` :data:`SETTLED_C_PER_MIN`), at most :data:`GRACE_MAX_S`;
* for :data:`CKPT_GRACE_S` (60 s) after a shorter idle spell (a checkpoint: the GPU
  paused or wrote). Fixed, not "until settled", so a fault that starts 10 s after a
  60 s checkpoint pages within 120 s of its start;
* for the recovery after a rule's engagement ends (the detector's
  :class:`~watchdog.detect.engaged.EngagedTimeline`): as after start-up, from
  :data:`RECOVERY_MIN_S`.

**Thermal lag.** A GPU whose power stepped by :data:`LAG_STEP` of its limit in the last
:data:`LAG_S` and whose temperature moves the same way, or one settling back towards its
own rising thermal line, is judged without its temperature and trend (:data:`LAG`, read
as normal): they follow the power at the GPU's own time constant.

**Workload changes.** A job moves every GPU of the node together; a fault moves one.

* With two or more busy GPUs: when more than half of them score over the threshold in
  one window (2 of 2, 3 of 4, 5 of 8) nobody is paged for it. Held for
  :data:`CONSENSUS_WINDOWS` windows in a row, or at once when the departure shows
  workload evidence (below) on most of them, it is a **workload change**.
* One busy GPU (a 1-GPU node, or a job on one GPU): its own evidence only. Over the
  threshold with its memory used moved by more than :data:`MEM_STEP` of the total, its
  utilization by more than :data:`UTIL_STEP` points, both against its recent normal, or
  right after an idle gap (a new process), it is a workload change. **A power drop at
  unchanged utilization and memory is never one**: that GPU is judged (and pages).
* With peers at work, a GPU over the threshold whose furthest feature out of range is a
  level of the work (power, temperature, utilization, memory) while its peer features
  lie inside the range moves with its job (a phase its peers reach a window later):
  not judged (:meth:`Gate._with_peers`).
* Before any of that, the known normals are tried (the fitted model's own, and the last
  ones learned): a node back on a job it ran before (or out of a long checkpoint) is
  judged against that normal at once, no change declared (:meth:`Gate._known`).
* A GPU working alone, back at a power level its job held and left, is not judged for
  as long as that phase lasted (:meth:`Gate._phase`).
* A GPU working alone remembers the most power it drew at each activity of its work
  (utilization, memory used, memory-controller and GPM activity); drawing
  :data:`SLOW_FALL` of its limit and :data:`SLOW_FRAC` of that power less at the same
  activity, it is slowing down (``own_power``, judged, never a workload change)
  (:meth:`Gate._slowed`). Its work ends at a warm-up, a workload change, or an idle
  spell in which it released its memory (a checkpoint holds it).

On a workload change every GPU of the job is not judged while the node settles (at
least :data:`WARM_MIN_S`, then until the GPUs' median temperature trend is within
:data:`RELEARN_C_PER_MIN`, at most :data:`GRACE_MAX_S`), then the model **re-learns** from
the settled windows' features (up to :data:`SETTLE_WINDOWS` of each GPU, outside any
grace or checkpoint, at least :data:`MIN_SETTLE_WINDOWS`): the first of (1) a known
normal and (2) the features whose settled level lies outside the training range moved
back to the training median (never :data:`NO_SHIFT`: physics and health) under which the
settled windows lie inside the training range and score under the fit's in-sample
quantile becomes the GPU's normal (else (2) all the same: the node stays unsettled, and
the rules above keep it from paging): its offsets are subtracted before every later
scoring, until the next change or refit, and only where the raw level lies further from
the training range than the shifted one (:meth:`Gate._nearer`: the job's other phase,
inside the range, is judged as it is). Why offsets and not a refit: a refit needs an
hour of busy time (``model: auto``'s minimum baseline), and a GPU that fails 10 minutes
into a new job must still page; a shift keeps what the forest learned (both power phases,
the peers, each GPU's own thermal line) and moves only the levels the new job set. What
it cannot see: a fault already present while the node settles is learned as that GPU's
normal where it moved a level the new job moves too (see :data:`PEER_BY_NODE`), except a
GPU whose power fell from its peers' at unchanged work after the job's first busy
windows: its normal is its place before the fall (:meth:`Gate._falls`).
``workload_changed_at`` and ``workload_change`` (the reason) go to ``watchdog status``;
each change and each re-learned normal is a log line.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from watchdog.anomaly import baseline
from watchdog.anomaly import features as F

IDLE_GAP_S = 300.0  # an idle spell this long (s) ends in a warm-up, a shorter one is a checkpoint
CKPT_GRACE_S = 60.0  # not judged for this long (s) after a checkpoint-like idle spell
WARM_MIN_S = 120.0  # start-up, warm-up, workload change: at least this long (s)
RECOVERY_MIN_S = 60.0  # after a rule's engagement ends: at least this long (s)
GRACE_MAX_S = 300.0  # and never longer than this (s): the 5 min
SETTLED_C_PER_MIN = 1.0  # a GPU whose temperature trend is within this (C/min) has settled
# a node re-learns once its GPUs' median temperature trend is within this (C/min): the
# last 1.5-1.0 C/min of a new job's warm-up take a minute on the sim (a fault 6 min into
# a new job was judged from ~7.5 min: median alert 133 s, 113 s with this), and the
# temperature's offset is then learned a degree or two short (never own_temp's)
RELEARN_C_PER_MIN = 1.5
CONSENSUS_WINDOWS = 6  # a departure held this many windows (60 s: a whole window in it) is a change
MEM_STEP = 0.03  # memory used moved by more than this fraction of the total: a new job
UTIL_STEP = 25.0  # utilization moved by more than this many points: a new job
SPREAD_K = 3.0  # ... and by more than this many times its usual distance from the normal
SETTLE_WINDOWS = 9  # windows of each GPU the re-learning uses (the last 90 s at 10 s)
MIN_SETTLE_WINDOWS = 3  # steady windows (no grace, no checkpoint) each GPU needs to re-learn
GIVE_UP_S = 1800.0  # no steady windows this long (s) after a change: keep the old normal
# Re-learning the peer features by the job's median (the same offset for every GPU)
# instead of each GPU's own: a fault present while the node settles then stays a
# departure from its peers (bursty_util written 6 min into a new job is found), but the
# hot GPU of a job on part of the node keeps its new distance from its peers as a
# departure. Off: what bench/model_jobs.py measured (docs/model.md).
PEER_BY_NODE = False
FIT_FRAC = 0.8  # a normal fits when at least this share of those windows scores below
KNOWN = 4  # normals remembered (the fitted model's own counts as one)
# never shifted: each GPU's own thermal line and the drift are physics, not the workload;
# a healthy GPU without throttle reasons runs at its maximum clock and its HBM at its
# own clock whatever the job (so a fault there is never learned as a new normal)
NO_SHIFT = frozenset(("own_temp", "peer_temp_drift", "sm_clock_unexplained", "mem_clock_frac",
                      "peer_mem_clock", "peer_util_drops", "own_power"))
THERMAL_PEERS = ("peer_temp", "peer_temp_slope", "peer_temp_drift")  # follow power
# what a GPU's temperature lagging behind a power step moves (read as normal then)
LAG = ("temp_mean", "temp_slope", "peer_temp", "peer_temp_slope")
LAG_S = 180.0  # a power step this recent (s: 3 thermal time constants) can still move temperature
LAG_WINDOWS = 19  # windows of power kept for it (LAG_S at one window every 10 s)
LAG_STEP = 0.05  # a power change of this fraction of the limit is a step
LAG_C_PER_MIN = 0.5  # a temperature trend this fast (C/min) towards a step: the lag
REASONS = frozenset(("frac_locked", "frac_power_cap", "frac_sync_boost", "frac_thermal",
                     "frac_hw_slowdown"))  # features that are a throttle the rules name
STAND_OUT = 0.15  # a GPU over the threshold must score this much over its peers' median
SPIN_FRAC = 0.3  # a working GPU under this fraction of its power limit spins in a collective
MEMBER_MEM = 0.1  # a GPU holding this fraction of its memory belongs to a job
IDLE_UTIL = 10.0  # a member under this utilization (%, the window's mean) waits for the job
POWER_UP = 0.15  # alone, power this much (of its limit) over its normal: a heavier phase
# A GPU's power fell this much of its limit against its peers while its job settled, at
# unchanged utilization and memory: its normal is its place before the fall (issue 19:
# power at 65 % written 6 min into a new job was learned as the job's normal: missed on
# 3 of 6 8-GPU nodes, found after 920 s on a fourth)
FALL_PEER = 0.08
# A GPU working alone that draws SLOW_FALL of its limit less than it drew at the same
# activity earlier in its work, and SLOW_FRAC of that power or more, is slowing down
# (own_power, judged: the slowdown at 65 % of normal power). Activity: the
# window's levels of ACTIVITY each within its tolerance, memory-controller or GPM
# activity among them (without either, a job's lighter phase, less bandwidth and fewer
# tensor ops at the same utilization and memory used, looks the same)
SLOW_FALL = 0.15
SLOW_FRAC = 0.2
# ... and under the mean power of its judged-normal windows at that activity by more than
# this many times their spread (standard deviation): a real V100 alone, sampled every
# 30 s by W&B at half utilization, drew 0.47 +- 0.05 of its limit at one activity, at
# most 0.58 (real-wandb s7hjifgd), and windows at 0.36-0.41 paged 3 times as a slowdown
SLOW_NOISE_K = 3.0
WORK_ALPHA = 0.1  # weight of a new normal window in an activity's mean and spread of power
ACTIVITY = {"util_mean": 10.0, "mem_ratio": 0.03, "mem_util": 5.0, "sm_active": 5.0,
            "tensor_active": 5.0}  # feature -> tolerance (its unit)
ACTIVE = ("mem_util", "sm_active", "tensor_active")  # at least one of these must be read
WORKS = 32  # activity levels (and the most power drawn at each) remembered per GPU
LEARN_REACH = 0.5  # a normal window within this share of the tolerances: the same activity
REF_ALPHA = 0.1  # weight of a new normal window in a GPU's reference (util, memory)
PHASE_TOL = 0.05  # of the power limit: windows this near a stay's first power hold its level
PHASE_MIN_S = 60.0  # a level held this long (s) and left is a phase of the job (not a ramp)
PHASE_SLACK_S = 120.0  # a phase may last this much (s) longer than its longest stay so far
PHASES = 16  # phases (level, longest stay) remembered per GPU
START_UP = "start-up"  # the grace of a GPU's first busy window

Normal = dict[str, np.ndarray]  # uuid -> (F,) feature offsets


@dataclass
class _Work:
    """One activity of a GPU's work (levels in :data:`ACTIVITY` order) and the power (of
    its limit) it drew there: the most, and the mean and variance of its judged-normal
    windows (exponentially weighted, :data:`WORK_ALPHA`)."""

    act: np.ndarray
    most: float
    mean: float
    var: float = 0.0


@dataclass
class _Gpu:
    """What the gate remembers of one GPU (times in s of data time)."""

    seen: bool = False
    idle_since: float | None = None  # first not-busy window of the current idle spell
    grace_from: float | None = None
    grace_min: float = 0.0
    grace_fixed: bool = False  # a checkpoint's grace ends at grace_min, settled or not
    grace_why: str = ""
    engaged: bool = False
    after_gap: bool = False  # the current busy spell followed an idle gap (a new process)
    ref: tuple[float, float, float] | None = None  # (util %, memory, power) of its normal
    spread: tuple[float, float] = (0.0, 0.0)  # mean |util|, |memory| off the ref lately
    moved: int = 0  # windows in a row over the threshold with its own work changed
    drift_from: float = -math.inf  # its last grace began here: the drift's look-back is stale
    powers: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=LAG_WINDOWS))  # (t, power_frac) lately
    stay: tuple[float, float] | None = None  # (power_frac, since): the level it holds now
    phases: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=PHASES))  # (power_frac, s) held and left
    fell: bool = False  # fell from its peers while its job settled: peer_power judged shifted
    works: deque[_Work] = field(default_factory=lambda: deque(maxlen=WORKS))
    # idle with its memory released since it last worked: the process ended, and what
    # comes next is another (h100 1-GPU seed 9 of the week's stream: a job 72 s after
    # the last one, at its activity and memory and 0.73 of the limit where the last
    # drew 0.93, paged 10 times "power ... -20 points" as a slowdown)
    freed: bool = False

    def new_work(self, t: float) -> None:
        """Another process or job from ``t``: the drift's look-back, the phases, the power
        drawn at each activity and a fall are the old work's."""
        self.drift_from, self.stay, self.fell = t, None, False
        self.phases.clear()
        self.works.clear()


@dataclass
class _Relearn:
    since: float
    uuids: set[str]
    why: str
    windows: dict[str, deque[np.ndarray]] = field(default_factory=dict)
    early: dict[str, list[np.ndarray]] = field(default_factory=dict)  # first busy windows
    last: dict[str, deque[np.ndarray]] = field(default_factory=dict)  # busy, grace or not


class Gate:
    """Decides, window by window, which GPUs are judged and with which feature offsets.

    :meth:`step` takes one judged window (completed features ``(G, F)``, the model's
    raw scores ``(G,)``, the GPUs a rule holds) and returns the features and scores to
    judge with and the GPUs not to judge."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.gpus: dict[str, _Gpu] = {}
        self.normals: list[Normal] = [{}]  # the fitted model's own first
        self.current: Normal = {}
        self.relearn: _Relearn | None = None
        self.consensus = 0  # windows in a row with a node-wide departure
        self.last_t: float | None = None
        self._members: frozenset[str] = frozenset()
        self._drift_from = -math.inf  # the job's GPUs changed here
        self.workload_changed_at: float | None = None
        self.workload_change: str | None = None
        self.events: list[tuple[float, str]] = []  # (t, line): for the log

    def set_model(self, model: Any) -> None:
        """A refit: learned normals were offsets against the old model, so they go."""
        self.model = model
        self.normals, self.current, self.relearn = [{}], {}, None
        for st in self.gpus.values():  # a fall was judged against an offset that went
            st.fell = False

    # --- one window ------------------------------------------------------------------
    def observe(self, t: float, uuids: Sequence[str], feats: np.ndarray,
                engaged: set[str] | frozenset[str]) -> None:
        """A window seen but not judged (before the model, or the part it was fitted
        on): only the GPUs' transitions follow it."""
        self._transit(t, uuids, feats, F.valid_rows(feats[None])[0], engaged)

    def step(self, t: float, uuids: Sequence[str], feats: np.ndarray, scores: np.ndarray,
             engaged: set[str] | frozenset[str]
             ) -> tuple[np.ndarray, np.ndarray, set[str]]:
        """``(feats, scores, skip)``: the window to judge (offsets applied), its scores,
        and the GPUs not to judge at ``t`` (a rule holds them, a grace or a re-learning
        runs, or the node departs together)."""
        busy = F.valid_rows(feats[None])[0]
        raw, pausing, grace = self._transit(t, uuids, feats, busy, engaged)
        raw = self._slowed(uuids, raw, busy, engaged)
        real = raw  # the transitions and the re-learning see the real trends
        raw = self._lag(t, uuids, raw)
        if real is not feats:  # peers re-taken among the job's GPUs: score that
            scores = self._score(real, busy)
        skip: set[str] = set(engaged) | pausing | grace
        # a lag is no fault, but the departure it is part of may be a new job's
        feats, s_real = self._apply(uuids, real, scores, self.current)
        scores = s_real
        if raw is not real:
            feats, scores = self._apply(uuids, raw, None, self.current)
        thr = self.model.threshold
        judged = [g for g, u in enumerate(uuids) if busy[g] and u not in engaged]
        if self.relearn is not None:
            steady = [g for g in judged if uuids[g] not in skip]  # no grace, no checkpoint
            settling = self.relearn.uuids
            skip |= settling
            # power does not lag: what a GPU drew from the job's first busy windows on
            # (warming included) is what a fall is measured from
            working = [g for g in judged if uuids[g] not in pausing]
            self._collect(t, uuids, real, steady, working)
            judged = [g for g in judged if uuids[g] not in settling]
        above = [g for g in judged if scores[g] > thr]
        if len(judged) >= 2 and 2 * len(above) > len(judged):
            feats, scores, skip = self._node_departs(t, uuids, raw, feats, scores, judged,
                                                     skip)
        elif len(above) >= 2 and 3 * len(above) >= len(judged):
            # a third of the node moves: unsettled, nobody judged; held, those GPUs'
            # workload changed (a job on part of the node, or part of it re-learned)
            self.consensus += 1
            skip |= {uuids[g] for g in judged}
            skip |= self._moved(t, uuids, raw, above)
            if self.consensus >= CONSENSUS_WINDOWS and self.relearn is None:
                self._change(t, {uuids[g] for g in above},
                             f"{len(above)} of {len(judged)} busy GPUs left their normal "
                             "together")
        else:
            self.consensus = 0
            if len(judged) == 1 and above:  # alone: a phase of its job it learned before
                alt = self._known(uuids, raw, above)
                if alt is not None:
                    feats, scores = alt
                    above = [g for g in above if scores[g] > thr]
                skip |= self._phase(t, uuids, feats, above)
            moved = sorted(set(above) | {g for g in judged if s_real[g] > thr})
            skip |= self._moved(t, uuids, raw, moved, solo=len(judged) == 1)
            skip |= self._not_alone(uuids, scores, judged, above)
            skip |= self._throttled(uuids, feats, above)
            if len(judged) >= 2:
                skip |= self._with_peers(uuids, feats, above)
        for g, u in enumerate(uuids):
            if g not in above:
                self.gpus[u].moved = 0
        q = float(self.model.calibration.get("in_sample_q", thr))
        for g in judged:  # a window like the training's (not one just under the threshold)
            if uuids[g] not in skip and scores[g] <= q and self._inside(feats[g]):
                self._remember(uuids[g], raw[g])
        return self._for_runner(feats, raw), scores, skip

    def _transit(self, t: float, uuids: Sequence[str], feats: np.ndarray, busy: np.ndarray,
                engaged: set[str] | frozenset[str]
                ) -> tuple[np.ndarray, set[str], set[str]]:
        """The transitions part of :meth:`step`: the window with the peers taken among the
        job's GPUs, the GPUs of a job in a checkpoint, and the busy GPUs in a grace
        (start-up, warm-up, after a checkpoint, recovery after a rule)."""
        gap = self.last_t is not None and t - self.last_t >= IDLE_GAP_S
        self.last_t = t
        pf = feats[:, F.INDEX["power_frac"]]
        mem = feats[:, F.INDEX["mem_ratio"]]
        for g, u in enumerate(uuids):
            self._transitions(t, u, bool(busy[g]), u in engaged, gap,
                              freed=not busy[g] and bool(mem[g] < MEMBER_MEM))
            if not math.isnan(pf[g]):
                self.gpus[u].powers.append((t, float(pf[g])))
                if busy[g]:
                    self._hold(self.gpus[u], t, float(pf[g]))
        raw, pausing = self._adjust(t, uuids, feats, busy)
        grace = {u for g, u in enumerate(uuids)
                 if busy[g] and u not in engaged and self._in_grace(t, u, raw[g])}
        return raw, pausing, grace

    def _adjust(self, t: float, uuids: Sequence[str], feats: np.ndarray, busy: np.ndarray
                ) -> tuple[np.ndarray, set[str]]:
        """The window as the model should see it and the GPUs of a job in a checkpoint.

        * **Peers among the job's GPUs.** :mod:`features` compares a GPU with the median
          of every GPU of the node: right while one job holds them all (what the model
          is fitted on), wrong for a job on 4 of 8 GPUs, whose median falls between the
          working and the unused ones. A GPU belongs to the job when it works or holds
          memory (:data:`MEMBER_MEM`); when some GPUs do not, the peer features are taken
          again against the median of the members at work (0 with fewer than two, as on
          a 1-GPU node), and ``peer_util_drops`` and ``peer_temp_drift`` (against the
          whole node's median, unused GPUs included) read as normal (NaN).
        * **A job in a checkpoint.** A member that holds its memory but does not work
          (rank 0 writing, every rank paused) while others work, or most working members
          under :data:`SPIN_FRAC` of their power (spinning in a collective while a
          writer on another node finishes): the job waits, and no member is judged
          until it is back (then the checkpoint's grace). A hang is the rules' to name
          (``comm_hang``, ``stall``); on a 1-GPU node there is no collective to wait in,
          and a power drop there is judged.
        * **Drift with a history.** ``peer_temp_drift`` looks back 10 min: it reads as
          normal (NaN) for that long after the job's GPUs changed or the GPU's grace
          began (a warm-up, a new job), when the look-back compares with other work."""
        mem = feats[:, F.INDEX["mem_ratio"]]
        with np.errstate(invalid="ignore"):
            member = busy | (mem >= MEMBER_MEM)
        members = frozenset(u for u, m in zip(uuids, member, strict=True) if m)
        if members != self._members:
            self._members = members
            self._drift_from = t
        out = job_peers(feats)
        pausing: set[str] = set()
        pf = feats[:, F.INDEX["power_frac"]]
        util = feats[:, F.INDEX["util_mean"]]
        with np.errstate(invalid="ignore"):
            spin = busy & (pf < SPIN_FRAC)
            # waiting: no work at all (a rank writing, every rank paused); a member at work
            # under the model's busy line (another job's GPU at 47-56 %, real-wandb
            # ghln1e4f) waits for nothing
            idle = np.where(np.isnan(util), ~busy, util < IDLE_UTIL)
        if len(uuids) > 1 and (((member & idle).any() and (member & busy).any())
                               or 2 * spin.sum() > max(1, (member & busy).sum())):
            pausing = set(members)
            for u in members:
                self.gpus[u].idle_since = self.gpus[u].idle_since or t
        lookback = F.LOOKBACK_S + F.WINDOW_S
        stale = [g for g, u in enumerate(uuids)
                 if t - max(self._drift_from, self.gpus[u].drift_from) < lookback]
        if stale:
            out = out.copy() if out is feats else out
            out[stale, F.INDEX["peer_temp_drift"]] = np.nan
        return out, pausing

    def _lag(self, t: float, uuids: Sequence[str], raw: np.ndarray) -> np.ndarray:
        """``raw`` with :data:`LAG` read as normal (NaN) on the GPUs :meth:`_lagging`
        (a copy where any is; the transitions and the re-learning keep the real trend:
        they ask whether the GPU has settled)."""
        lag = self._lagging(t, uuids, raw)
        if not lag.any():
            return raw
        out = raw.copy()
        out[np.ix_(lag, [F.INDEX[f] for f in LAG])] = np.nan
        return out

    def _lagging(self, t: float, uuids: Sequence[str], feats: np.ndarray) -> np.ndarray:
        """``(G,)``: GPUs whose temperature settles back towards their own thermal line
        after a power change (:func:`baseline.lagging`). Their temperature and its trend
        (:data:`LAG`) follow the power step, at their own time constant: physics, read as
        normal. A job whose power steps are larger than the fit's first job's (a phase
        switch of 0.47 -> 0.83 of the limit on a GPU fitted on a job at 0.41: +7.8 C/min,
        beyond every trend the fit saw) paged "temperature trend +7.8 C/min" at every
        switch (28 false anomalies on one 1-GPU node of the week's stream, seed 9). A
        fault moves a GPU away from its line (a drift: above it and rising), never back
        towards it; the power fault itself still shows in the power features."""
        out = np.zeros(len(uuids), bool)
        pf = feats[:, F.INDEX["power_frac"]]
        slope = feats[:, F.INDEX["temp_slope"]]
        for g, u in enumerate(uuids):  # its power stepped lately, its temperature follows
            if math.isnan(pf[g]):
                continue
            old = [p for tt, p in self.gpus[u].powers if t - tt <= LAG_S]
            step = pf[g] - old[0] if old else 0.0
            out[g] = (abs(step) >= LAG_STEP and step * slope[g] > 0
                      and abs(slope[g]) >= LAG_C_PER_MIN)
        coef, known = self.model.base_coef, self.model.base_uuids
        if coef is not None and len(known):
            out |= baseline.lagging(feats, baseline.lines_for(uuids, known, coef))
        return out

    @staticmethod
    def _for_runner(feats: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """The features the runner explains: shifted, but with the GPU's own utilization
        (the runner judges only a GPU at work, by its real utilization)."""
        if feats is raw:
            return raw
        out = feats.copy()
        k = F.INDEX["util_mean"]
        out[:, k] = raw[:, k]
        return out

    # --- transitions -----------------------------------------------------------------
    def _transitions(self, t: float, u: str, busy: bool, engaged: bool, gap: bool,
                     freed: bool = False) -> None:
        """One GPU's transitions at ``t`` (``freed``: idle with its memory released)."""
        st = self.gpus.setdefault(u, _Gpu())
        st.freed = st.freed or freed
        if gap and st.idle_since is None:  # the data stopped: an idle spell since then
            st.idle_since = t - IDLE_GAP_S
        if engaged:
            st.engaged = True
            return
        if st.engaged:
            st.engaged = False
            if busy:
                self._grace(st, t, RECOVERY_MIN_S, "recovery after a rule's incident")
        if not busy:
            if st.idle_since is None:
                st.idle_since = t
            return
        if not st.seen:
            st.seen = True
            st.after_gap = True
            self._grace(st, t, WARM_MIN_S, START_UP)
        elif st.idle_since is not None:
            if t - st.idle_since >= IDLE_GAP_S:
                st.after_gap = True
                self._grace(st, t, WARM_MIN_S, "warm-up after an idle gap")
            else:
                self._grace(st, t, CKPT_GRACE_S, "after a checkpoint", fixed=True)
            if st.freed:  # its process ended (a checkpoint holds its memory): new work
                st.new_work(t)
        st.idle_since, st.freed = None, False

    @staticmethod
    def _grace(st: _Gpu, t: float, minimum: float, why: str, fixed: bool = False) -> None:
        st.grace_from, st.grace_min, st.grace_fixed, st.grace_why = t, minimum, fixed, why
        if not fixed:
            st.new_work(t)

    @staticmethod
    def _hold(st: _Gpu, t: float, power: float) -> None:
        """A busy window's power: the level the GPU holds goes on, or a stay of
        :data:`PHASE_MIN_S` or more ends and is remembered as a phase of its job (idle
        windows, a checkpoint, do not end it)."""
        if st.stay is not None and abs(power - st.stay[0]) <= PHASE_TOL:
            return
        if st.stay is not None and t - st.stay[1] >= PHASE_MIN_S:
            st.phases.append((st.stay[0], t - st.stay[1]))
        st.stay = (power, t)

    def _in_grace(self, t: float, u: str, row: np.ndarray) -> bool:
        st = self.gpus[u]
        if st.grace_from is None:
            return False
        age = t - st.grace_from
        slope = row[F.INDEX["temp_slope"]]
        settled = math.isnan(slope) or abs(slope) <= SETTLED_C_PER_MIN
        if age < st.grace_min or (not st.grace_fixed and not settled and age < GRACE_MAX_S):
            return True
        st.grace_from = None
        return False

    # --- departures ------------------------------------------------------------------
    def _node_departs(self, t: float, uuids: Sequence[str], raw: np.ndarray,
                      feats: np.ndarray, scores: np.ndarray, judged: list[int],
                      skip: set[str]) -> tuple[np.ndarray, np.ndarray, set[str]]:
        """More than half the busy GPUs over the threshold together: the workload."""
        alt = self._known(uuids, raw, judged)
        if alt is not None:
            return alt[0], alt[1], skip
        self.consensus += 1
        skip |= {uuids[g] for g in judged}
        evidence = [g for g in judged if self._evidence(uuids[g], raw[g])]
        if self.consensus >= CONSENSUS_WINDOWS:
            why = (self._why(uuids[evidence[0]], raw[evidence[0]]) if evidence else
                   "most busy GPUs left their normal together")
            self._change(t, {uuids[g] for g in judged}, f"{why} ({len(judged)} busy GPUs)")
        return feats, scores, skip

    def _moved(self, t: float, uuids: Sequence[str], raw: np.ndarray, above: list[int],
               solo: bool = False) -> set[str]:
        """GPUs over the threshold whose own work changed (memory used or utilization
        moved, a new process after a gap): a job started on them, not a fault; held
        :data:`CONSENSUS_WINDOWS` windows (the way into a checkpoint passes), it is a
        workload change of those GPUs. One GPU, the only one at work or one of many:
        a power drop at unchanged utilization and memory is judged."""
        out = set()
        for g in above:
            st = self.gpus[uuids[g]]
            if not self._evidence(uuids[g], raw[g], alone=len(raw) == 1 or solo):
                st.moved = 0
                continue
            out.add(uuids[g])
            st.moved += 1
            if st.moved >= CONSENSUS_WINDOWS:
                st.moved = 0
                self._change(t, {uuids[g]}, self._why(uuids[g], raw[g]) + f" (GPU {g})")
        return out

    @staticmethod
    def _not_alone(uuids: Sequence[str], scores: np.ndarray, judged: list[int],
                   above: list[int]) -> set[str]:
        """GPUs over the threshold that do not stand out from the others at work (their
        score less than :data:`STAND_OUT` over the others' median): the node is moving
        as a whole (a long checkpoint, a new phase), each GPU crossing at its own
        moment; a fault lifts one GPU's score well clear of its peers'."""
        out = set()
        for g in above:
            others = [scores[h] for h in judged if h != g and not np.isnan(scores[h])]
            if others and scores[g] - float(np.median(others)) < STAND_OUT:
                out.add(uuids[g])
        return out

    def _over(self, row: np.ndarray) -> np.ndarray | None:
        """``(F,)``: how far each feature of ``row`` lies outside the training range, in
        the model's units (negative inside; NaN read as the fill); None without a range.
        The furthest one names what a departure is made of."""
        lo, hi, unit = self.model.lo, self.model.hi, self.model.unit
        if lo is None or hi is None or unit is None:
            return None
        x = np.where(np.isnan(row), self.model.fill, row)
        return np.maximum(lo - x, x - hi) / unit

    def _throttled(self, uuids: Sequence[str], feats: np.ndarray, above: list[int]
                   ) -> set[str]:
        """GPUs over the threshold because of a clock-event reason the model never saw
        (furthest outside the training range: time at the power cap, in thermal or HW
        slowdown, locked clocks): a named throttle, which the rules judge
        (``rules/throttle.yaml``), not an unnamed fault."""
        out = set()
        for g in above:
            over = self._over(feats[g])
            if over is None:
                break
            k = int(np.argmax(over))
            if over[k] > 0 and F.FEATURES[k] in REASONS:
                out.add(uuids[g])
        return out

    def _with_peers(self, uuids: Sequence[str], feats: np.ndarray, above: list[int]
                    ) -> set[str]:
        """GPUs over the threshold (with peers at work) whose departure their peers share:
        the feature furthest outside the training range is a level of the work (power,
        temperature and their trends, utilization, memory: not a peer feature, not one of
        :data:`NO_SHIFT`, health and physics) while every peer feature lies inside it.

        Why: the GPUs of a job change power phase together, but only more than half of
        them over the threshold at once is a node-wide departure; on a job of 2 GPUs
        one of them crossing while the other stays just under paged as "power does not
        match the work" at a new job's heavier phase (8 of the 20 false anomalies left
        on the 2- and 4-GPU nodes of the week's stream). A fault on one GPU moves it
        away from its peers (``peer_power``, ``peer_sm_clock``, ``peer_util_std``...) or
        shows in a health feature (``own_temp``, ``sm_clock_unexplained``, the HBM
        clock): those are judged."""
        out = set()
        for g in above:
            over = self._over(feats[g])
            if over is None:
                break
            k = int(np.argmax(over))
            name = F.FEATURES[k]
            if over[k] <= 0 or name.startswith("peer_") or name in NO_SHIFT:
                continue
            # a power step its peers share: their temperatures follow it each at its own
            # rate (its own thermal line), so the thermal peer features move for a while
            ignore = THERMAL_PEERS if name in ("power_frac", "power_slope") else ()
            if not any(over[F.INDEX[p]] > 0 for p in F.FEATURES
                       if p.startswith("peer_") and p not in ignore):
                out.add(uuids[g])
        return out

    def _phase(self, t: float, uuids: Sequence[str], feats: np.ndarray, above: list[int]
               ) -> set[str]:
        """GPUs working alone, over the threshold at a power level their job held before
        (within :data:`PHASE_TOL`, for :data:`PHASE_MIN_S` or more) and left on its own,
        for no longer than the longest such stay plus :data:`PHASE_SLACK_S`, whose
        furthest feature out of the training range is a level of the work (not one of
        :data:`NO_SHIFT`, health and physics): a phase of the job, not judged.

        Why: alone, a job switching between a heavy and a light phase at the same
        utilization and memory looks like a power fault on each switch, and the re-
        learning saw one phase (a100 1-GPU seed 9 of the week's stream: 0.92 and 0.61 of
        the limit, 7 false "power 61 % (normal 48 %)"). A slowdown at such a level still
        pages once it lasts longer than the phase ever did; a drift shows in
        ``own_temp`` and is judged at once."""
        out = set()
        for g in above:
            st = self.gpus[uuids[g]]
            over = self._over(feats[g])
            if st.stay is None or over is None:
                continue
            level, since = st.stay
            held = [d for p, d in st.phases if abs(p - level) <= PHASE_TOL]
            if not held or t - since > max(held) + PHASE_SLACK_S:
                continue
            if F.FEATURES[int(np.argmax(over))] not in NO_SHIFT:
                out.add(uuids[g])
        return out

    def _evidence(self, u: str, row: np.ndarray, alone: bool = False) -> bool:
        """Whether the GPU's work changed, not only its power: memory used or utilization
        moved against its normal, or (``alone``: the only GPU at work, no peers to
        compare with) it runs a process that started after an idle gap. A GPU that
        started with its peers is judged against them instead: a fault present from its
        first minutes stands out there. Its power up by :data:`POWER_UP` is a heavier
        phase, a new workload, unless it draws less than it drew at the same activity
        in its work (``own_power`` set): a slowdown, whose heavier phase is no new job
        (a100 1-GPU seed 3 of ``model_jobs.py --faults``: slowed from the change on, it
        re-learned its slowed heavy phase as a new workload)."""
        st = self.gpus[u]
        if st.ref is None:
            return st.after_gap and alone
        power = row[F.INDEX["power_frac"]]
        slowed = not math.isnan(row[F.INDEX["own_power"]])
        harder = alone and not slowed and power - st.ref[2] > POWER_UP  # a heavier phase
        moved_util, moved_mem = _moved_from(st, row)
        return bool(moved_mem or moved_util or (st.after_gap and alone) or harder)

    def _why(self, u: str, row: np.ndarray) -> str:
        st = self.gpus[u]
        util, mem = row[F.INDEX["util_mean"]], row[F.INDEX["mem_ratio"]]
        moved_util, moved_mem = _moved_from(st, row) if st.ref is not None else (False, False)
        if st.ref is not None and moved_mem:
            return f"memory used {st.ref[1]:.0%} -> {mem:.0%}"
        if st.ref is not None and moved_util:
            return f"utilization {st.ref[0]:.0f}% -> {util:.0f}%"
        if st.after_gap:
            return "new work after an idle gap"
        if st.ref is not None and row[F.INDEX["power_frac"]] - st.ref[2] > POWER_UP:
            return (f"power {st.ref[2]:.0%} -> {row[F.INDEX['power_frac']]:.0%} of its limit "
                    "at the same work (a heavier phase)")
        return "most busy GPUs left their normal together"

    def _inside(self, row: np.ndarray) -> bool:
        """Whether the (shifted) window's levels lie inside the training range."""
        lo, hi = self.model.lo, self.model.hi
        if lo is None or hi is None:
            return True
        may = np.array([f not in NO_SHIFT for f in F.FEATURES])
        with np.errstate(invalid="ignore"):
            out = ((row < lo) | (row > hi)) & may & ~np.isnan(row)
        return not out.any()

    # --- a GPU alone slowing down ----------------------------------------------------
    def _slowed(self, uuids: Sequence[str], raw: np.ndarray, busy: np.ndarray,
                engaged: set[str] | frozenset[str]) -> np.ndarray:
        """``raw`` with ``own_power`` set on the one GPU at work (no peers at work; not
        while its job settles) where its power lies :data:`SLOW_FALL` of its limit and
        :data:`SLOW_FRAC` of that power or more under the most it drew at the same
        activity in its current work (:meth:`_works_at`): a copy where it is set.

        Why: with peers, a GPU that slows down falls away from them (``peer_power``).
        Alone, every other feature can read normal: on a 1-GPU node whose first job ran
        a heavy phase (0.85 of the limit) and a light one (0.47), a second job's heavy
        phase (0.79) slowed to 65 % draws 0.51, inside the training's range, at the
        utilization, memory and clocks of the work, and the forest scored it 0.45 under
        a threshold of 0.83 for 25 minutes (h100 seed 1 of ``model_jobs.py --faults``).
        What tells it from the job's own lighter phase (0.28 there) is the activity: the
        lighter phase moves less memory traffic and fewer tensor ops."""
        workers = [g for g, u in enumerate(uuids) if busy[g] and u not in engaged]
        if len(workers) != 1:
            return raw
        g = workers[0]
        u = uuids[g]
        if self.relearn is not None and u in self.relearn.uuids:
            return raw
        power = float(raw[g, F.INDEX["power_frac"]])
        work = self._works_at(self.gpus[u], raw[g])
        if work is None or math.isnan(power):
            return raw
        most = work.most
        fall = power - most
        if (fall > -SLOW_FALL or power > (1.0 - SLOW_FRAC) * most
                or power > work.mean - SLOW_NOISE_K * math.sqrt(work.var)):
            return raw
        out = raw.copy()
        out[g, F.INDEX["own_power"]] = fall
        return out

    @staticmethod
    def _works_at(st: _Gpu, row: np.ndarray) -> _Work | None:
        """What the GPU drew at ``row``'s activity in its current work (:func:`_nearest`);
        None where no such activity is remembered."""
        k = _nearest(st.works, row)
        return None if k is None else st.works[k]

    @staticmethod
    def _learn_work(st: _Gpu, row: np.ndarray, judged: bool = False) -> None:
        """A normal window's activity and power: the most drawn at that activity so far
        (a window part-way into a slowdown never lowers it), or a new activity where none
        lies within :data:`LEARN_REACH` of the tolerances (a job's ramp into its phase
        would otherwise hold the steady level in an activity learned on the way: a100
        1-GPU seed 1 of ``model_jobs.py --faults`` kept 45 % memory-controller activity
        under a ramp window's 40 %, and learned the slowdown at 45.4 % as a new one).
        ``judged``: a window judged normal one by one (not the job's first and settled
        windows taken in at a re-learning, which may hold a fall): it also moves the
        activity's mean and spread of power."""
        power = float(row[F.INDEX["power_frac"]])
        if math.isnan(power) or not math.isnan(row[F.INDEX["own_power"]]):
            return
        k = _nearest(st.works, row, LEARN_REACH)
        if k is not None:
            w = st.works[k]
            w.most = max(w.most, power)
            if judged:
                d = power - w.mean
                w.mean += WORK_ALPHA * d
                w.var = (1.0 - WORK_ALPHA) * (w.var + WORK_ALPHA * d * d)
        elif (~np.isnan(row[ACT_AT]) & ACT_ACTIVE).any():  # one of ACTIVE read
            st.works.append(_Work(row[ACT_AT].copy(), power, power))

    def _remember(self, u: str, row: np.ndarray) -> None:
        """A judged, normal window: the GPU's reference (util, memory) follows it, and
        the power it drew at its activity (:meth:`_learn_work`)."""
        st = self.gpus[u]
        self._learn_work(st, row, judged=True)
        now = (float(row[F.INDEX["util_mean"]]), float(row[F.INDEX["mem_ratio"]]),
               float(row[F.INDEX["power_frac"]]))
        st.after_gap = False
        if st.ref is None:
            st.ref = now
            return
        # a metric the log lacks stays NaN (a log without memory: no evidence from it);
        # one that comes and goes keeps its last level
        a = REF_ALPHA
        dev = (abs(now[0] - st.ref[0]), abs(now[1] - st.ref[1]))
        st.spread = tuple(s if math.isnan(d) else (1 - a) * s + a * d
                          for s, d in zip(st.spread, dev, strict=True))  # type: ignore[assignment]
        st.ref = tuple(n if math.isnan(r) else r if math.isnan(n) else (1 - a) * r + a * n
                       for r, n in zip(st.ref, now, strict=True))  # type: ignore[assignment]

    def _known(self, uuids: Sequence[str], raw: np.ndarray, judged: list[int]
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """Scores under another known normal when most of ``judged`` fall below there:
        of those, the one under which most fall below, then the lowest scores.

        Why the best and not the first: a normal learned before one GPU's own
        re-allocation (it re-allocated later than its peers) fits the others as well
        as a later one, but holds that GPU's old memory; taken first, it paged "memory
        used 40% (normal 66%)" at the job's next power phase (h100 4-GPU seed 8 of the
        week's stream). And the GPUs over the threshold under it take the median memory
        offset of those under it, where that brings them under (a normal learned on a
        job that held two GPUs' memory differently paged "memory used 50% (normal 88%)"
        on both, a100 8-GPU seed 7); only memory: taking all of the peers' offsets gave
        the node's hot GPU its peers' temperature offsets (h100 4-GPU seed 9: "temperature
        68 C (normal 42 C)"). A GPU that departs from its peers stays over."""
        thr = self.model.threshold
        best: tuple[tuple[int, float], Normal, np.ndarray, np.ndarray] | None = None
        for normal in self.normals:
            if normal is self.current:
                continue
            f2, s2 = self._apply(uuids, raw, None, normal)
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
            # the GPUs that do not fit try the median memory offset of those that do:
            # one GPU's entry in a known normal can be older than its last re-allocation
            # (only memory: the other offsets are the GPU's own, its place in the airflow)
            zero = np.zeros(raw.shape[1])
            k = F.INDEX["mem_ratio"]
            peers = float(np.median([normal.get(uuids[g], zero)[k] for g in judged
                                     if g not in out]))
            tried = {}
            for g in out:
                off = normal.get(uuids[g], zero).copy()
                off[k] = peers
                tried[uuids[g]] = off
            _f, s3 = self._apply(uuids, raw, None, {**normal, **tried})
            mine = {uuids[g]: tried[uuids[g]] for g in out if not s3[g] > thr}
            if mine:
                normal = {**normal, **mine}
                f2, s2 = self._apply(uuids, raw, None, normal)
        self.current = normal
        return f2, s2

    def _change(self, t: float, gpus: set[str], why: str) -> None:
        self.workload_changed_at, self.workload_change = t, why
        # a job moves as a whole: every GPU of it (working or holding memory) and those
        # that started work with them re-learn together, departed or not yet
        gpus = gpus | {u for u, st in self.gpus.items() if st.after_gap} | set(self._members)
        if self.relearn is not None:  # another change while one settles: both, from now
            gpus = gpus | self.relearn.uuids
        self.relearn = _Relearn(t, gpus, why)
        for u in gpus:
            self.gpus[u].new_work(t)
        self.consensus = 0
        self.events.append((t, f"the workload changed: {why}; not judged while it settles "
                               f"({WARM_MIN_S:.0f}-{GRACE_MAX_S:.0f} s), then judged "
                               "against its new normal"))

    # --- re-learning -----------------------------------------------------------------
    def _collect(self, t: float, uuids: Sequence[str], raw: np.ndarray,
                 judged: list[int], working: list[int]) -> None:
        rl = self.relearn
        assert rl is not None
        for g in working:
            if uuids[g] not in rl.uuids:
                continue
            early = rl.early.setdefault(uuids[g], [])
            if len(early) < SETTLE_WINDOWS:
                early.append(raw[g])
            rl.last.setdefault(uuids[g], deque(maxlen=SETTLE_WINDOWS)).append(raw[g])
        slopes = []
        for g in judged:
            if uuids[g] in rl.uuids:
                rl.windows.setdefault(uuids[g], deque(maxlen=SETTLE_WINDOWS)).append(raw[g])
                slopes.append(abs(raw[g][F.INDEX["temp_slope"]]))
        age = t - rl.since
        settled = not slopes or np.nanmedian(slopes) <= RELEARN_C_PER_MIN
        if age < WARM_MIN_S or (not settled and age < GRACE_MAX_S):
            return
        if min((len(w) for w in rl.windows.values()), default=0) < MIN_SETTLE_WINDOWS:
            if age >= GIVE_UP_S:  # the GPUs went idle: nothing to learn, the old normal
                self.relearn = None
            return
        self._learn(t, rl)

    def _learn(self, t: float, rl: _Relearn) -> None:
        """The new normal from the settled windows (see the module docs)."""
        rows = {u: np.stack(list(w)) for u, w in rl.windows.items()}
        falls = self._falls(t, rl)
        pp = F.INDEX["peer_power"]
        for u, level in falls.items():  # the GPU as it was before it fell
            if u in rows:
                x = rows[u].copy()
            else:
                # never steady while the node settled (lagging its own fall): its last
                # busy windows, less their temperature. Without a normal of its own the
                # old job's memory made it a workload change of its own, re-learned
                # with the fault in it (a100 8-GPU seed 2 of model_jobs.py --faults)
                x = np.stack(list(rl.last[u]))
                x[:, [F.INDEX[f] for f in LAG]] = np.nan
            x[:, pp] = level
            rows[u] = x
        lo, hi = self.model.lo, self.model.hi
        fill = self.model.fill
        shift: Normal = {}
        centre: Normal = {}
        keep = np.array([f in NO_SHIFT for f in F.FEATURES])
        for u, x in rows.items():
            with F._quiet():
                med = np.nanmedian(x, axis=0)
            med = np.where(np.isnan(med) | keep, fill, med)
            centre[u] = med - fill
            if lo is not None and hi is not None:
                shift[u] = np.where(((med < lo) | (med > hi)) & ~keep, med - fill, 0.0)
        merged = [({**n, **{u: n.get(u, np.zeros_like(fill)) for u in rows}}, "a known normal")
                  for n in self.normals]
        if PEER_BY_NODE and len(rows) >= 2 and lo is not None and hi is not None:
            # the peer features move by the GPUs' median, the same for all (0 in range)
            peer = np.array([f.startswith("peer_") for f in F.FEATURES])
            with F._quiet():
                node = np.nanmedian(np.stack([c + fill for c in centre.values()]), axis=0)
            node = np.where(np.isnan(node), fill, node)
            out_node = np.where(((node < lo) | (node > hi)) & ~keep, node - fill, 0.0)
            for u in shift:
                shift[u] = np.where(peer, out_node, shift[u])
        cands = [*merged, ({**self.current, **shift}, "levels outside the training range "
                                                      "moved back")]
        chosen, how = None, ""
        for normal, label in cands:
            if self._fits(rows, normal):
                chosen, how = normal, label
                break
        if chosen is None:  # the new job's levels lie inside the range: shift those
            chosen, how = cands[-1][0], "levels outside the training range moved back " \
                "(its settled windows still score high: the node stays unsettled)"
        if not any(chosen is n for n in self.normals):
            self.normals = [self.normals[0], chosen, *self.normals[1:]][:KNOWN]
        if falls:  # judged against the level it fell from, in the training range or not
            chosen = dict(chosen)
            for u, level in falls.items():
                chosen[u] = chosen.get(u, np.zeros_like(fill)).copy()
                chosen[u][pp] = level - fill[pp]
        self.current = chosen
        for u, x in rows.items():  # the new job's utilization and memory are its normal
            with F._quiet():
                med = np.nanmedian(x, axis=0)
            st = self.gpus[u]
            st.ref = (float(med[F.INDEX["util_mean"]]), float(med[F.INDEX["mem_ratio"]]),
                      float(med[F.INDEX["power_frac"]]))
            with F._quiet():
                dev = np.nanmean(np.abs(x - med), axis=0)
            st.spread = tuple(0.0 if math.isnan(d) else float(d) for d in (
                dev[F.INDEX["util_mean"]], dev[F.INDEX["mem_ratio"]]))  # type: ignore[assignment]
            st.after_gap = False
        for u in falls:
            self.gpus[u].fell = True
        # the power the job drew at each activity so far, from its first busy windows
        # on (power does not lag: a warming GPU draws what its work needs)
        for u in rl.uuids:
            for x in [*rl.early.get(u, ()), *rl.windows.get(u, ())]:
                self._learn_work(self.gpus[u], x)
        self.relearn = None
        self.events.append((t, f"the model judges the new workload from now: {how}"))

    def _falls(self, t: float, rl: _Relearn) -> dict[str, float]:
        """GPUs whose power fell from their peers' while their job settled, at unchanged
        utilization and memory: ``{uuid: peer_power before the fall}``: ``peer_power`` in
        its last busy windows :data:`FALL_PEER` under its level in the job's first ones
        (warming or lagging included: power does not lag). A job moves every GPU
        together; one falling from its peers at the same work is failing, and learned as
        the job's normal it would be judged normal for as long as it lasts.

        Not alone (a 1-GPU node, a job on one GPU): there a job's lighter phase at the
        same utilization and memory within its first minutes is the same fall, and judged
        against the level before it, the simulated week's h100 1-GPU node of seed 2 paged
        28 times ("power 42% of its limit (this job's normal 74%)"); alone, what it drew
        at the same activity judges it (:meth:`_slowed`). Nor a fault present from the
        job's first busy window."""
        out: dict[str, float] = {}
        if len(rl.early) < 2:
            return out
        ut, mem = F.INDEX["util_mean"], F.INDEX["mem_ratio"]
        i = F.INDEX["peer_power"]
        for u, first in rl.early.items():  # a GPU still lagging its fall has no steady rows
            late = rl.last.get(u)
            if len(first) < MIN_SETTLE_WINDOWS or not late:
                continue
            with F._quiet():
                e = np.nanmedian(np.stack(first), axis=0)
                n = np.nanmedian(np.stack(list(late)), axis=0)
            if abs(n[ut] - e[ut]) > UTIL_STEP or abs(n[mem] - e[mem]) > MEM_STEP:
                continue  # its work changed: a phase of the job, learned as it is
            if e[i] - n[i] >= FALL_PEER:
                out[u] = float(e[i])
                self.events.append((t, f"{u}: power fell from {e[i]:+.0%} to {n[i]:+.0%} "
                                       "of its limit against its peers at unchanged work "
                                       "while its job settled: judged against its place "
                                       "before the fall"))
        return out

    def _fits(self, rows: dict[str, np.ndarray], normal: Normal) -> bool:
        """Whether every GPU's settled windows, less ``normal``'s offsets, look like the
        training: their median inside the training range (the features that may shift)
        and at least :data:`FIT_FRAC` of them scoring under the fit's in-sample quantile
        (not merely under the threshold, which a level just outside the range can pass
        and the job's next phase then cross)."""
        lo, hi = self.model.lo, self.model.hi
        q = float(self.model.calibration.get("in_sample_q", self.model.threshold))
        may = np.array([f not in NO_SHIFT for f in F.FEATURES])
        for u, x in rows.items():
            off = normal.get(u)
            y = x - off if off is not None else x
            if lo is not None and hi is not None:
                with F._quiet():
                    med = np.nanmedian(y, axis=0)
                if (((med < lo) | (med > hi)) & may & ~np.isnan(med)).any():
                    return False
            s = self._score(y, F.valid_rows(x[None])[0])
            if np.mean(s <= q) < FIT_FRAC:
                return False
        return True

    # --- offsets ---------------------------------------------------------------------
    def _score(self, x: np.ndarray, ok: np.ndarray) -> np.ndarray:
        """Scores of rows ``x`` (N, F) where ``ok`` (the raw windows' busy mask)."""
        s = np.full(len(x), np.nan)
        if ok.any():
            s[ok] = self.model.scores(x[ok])
        return s

    def _apply(self, uuids: Sequence[str], raw: np.ndarray, scores: np.ndarray | None,
               normal: Normal) -> tuple[np.ndarray, np.ndarray]:
        """``raw`` less ``normal``'s offsets, and its scores (``scores``: those of ``raw``,
        kept when no offset applies)."""
        ok = F.valid_rows(raw[None])[0]
        if not normal or not any(u in normal for u in uuids):
            return raw, scores if scores is not None else self._score(raw, ok)
        off = np.stack([normal.get(u, np.zeros(raw.shape[1])) for u in uuids])
        shifted = self._nearer(raw, raw - off)
        if normal is self.current:  # a fallen GPU is judged against where it fell from
            pp = F.INDEX["peer_power"]
            for g, u in enumerate(uuids):
                if u in self.gpus and self.gpus[u].fell:
                    shifted[g, pp] = raw[g, pp] - off[g, pp]
        return shifted, self._score(shifted, ok)

    def _nearer(self, raw: np.ndarray, shifted: np.ndarray) -> np.ndarray:
        """Feature by feature, the raw level where it lies nearer the training range than
        the shifted one (inside it: distance 0), else the shifted level.

        Why: an offset is learned from the new job's settled windows, one phase of it. A
        job with two power phases (high at full tensor load, low between) whose high
        phase lay beyond the training range and whose low phase lies inside it was moved
        out of the range by the high phase's offset at every switch (``power 15% of its
        limit (normal 56%)`` on a GPU working alone: 145 false anomalies on one 1-GPU
        node of the week's stream). A level the training knows needs no offset; a fault
        (power at 65 % of the high phase) still lies outside the range either way."""
        lo, hi = self.model.lo, self.model.hi
        if lo is None or hi is None:
            return shifted
        with np.errstate(invalid="ignore"):
            d_raw = np.maximum(np.maximum(lo - raw, raw - hi), 0.0)
            d_sh = np.maximum(np.maximum(lo - shifted, shifted - hi), 0.0)
            return np.where(d_raw < d_sh, raw, shifted)

    def status(self) -> dict[str, Any]:
        """For ``watchdog status``: the last workload change (data time) and its reason."""
        return {"workload_changed_at": self.workload_changed_at,
                "workload_change": self.workload_change,
                "relearning": self.relearn is not None}


def _moved_from(st: _Gpu, row: np.ndarray) -> tuple[bool, bool]:
    """Whether ``row``'s utilization and memory used moved from the GPU's normal: by more
    than :data:`UTIL_STEP` / :data:`MEM_STEP`, and by more than :data:`SPREAD_K` times
    their usual distance from it (a job's own swing: W&B's 30 s means of a real FSDP
    job's memory used swing between 85 and 100 % of the total, real-wandb ghln1e4f)."""
    assert st.ref is not None
    util, mem = row[F.INDEX["util_mean"]], row[F.INDEX["mem_ratio"]]
    return (bool(abs(util - st.ref[0]) > max(UTIL_STEP, SPREAD_K * st.spread[0])),
            bool(abs(mem - st.ref[1]) > max(MEM_STEP, SPREAD_K * st.spread[1])))


ACT_AT = np.array([F.INDEX[a] for a in ACTIVITY])
ACT_TOL = np.array(list(ACTIVITY.values()))
ACT_ACTIVE = np.array([a in ACTIVE for a in ACTIVITY])


def _nearest(works: Sequence[_Work], row: np.ndarray,
             reach: float = 1.0) -> int | None:
    """Of remembered activities ``works`` (levels in :data:`ACTIVITY` order, the most
    power drawn there), the index of the nearest to ``row``'s whose every level lies
    within ``reach`` of its tolerance, one of :data:`ACTIVE` read in both (a level unread
    in either left out); None where there is none. Distance: the largest level's, in
    tolerances."""
    if not works:
        return None
    d = np.abs(row[ACT_AT] - np.stack([w.act for w in works])) / ACT_TOL  # (W, A)
    read = ~np.isnan(d)
    ok = (read & ACT_ACTIVE).any(axis=1) & ~(np.where(read, d, 0.0) > reach).any(axis=1)
    if not ok.any():
        return None
    far = np.where(ok, np.where(read, d, 0.0).max(axis=1), np.inf)
    return int(np.argmin(far))


def job_peers(feats: np.ndarray) -> np.ndarray:
    """``(..., G, F)`` features with the peer features taken among the job's GPUs (see
    :meth:`Gate._adjust`): where some GPUs of a window neither work nor hold memory
    (:data:`MEMBER_MEM`), each member's peer features are taken against the median of the
    members at work (0 with fewer than two), a non-member's read as unknown (NaN), and
    ``peer_util_drops`` and ``peer_temp_drift`` read as unknown on every GPU. The rest is
    ``feats`` itself (a copy only where something is taken again). The fit takes its
    windows through this too (:func:`watchdog.anomaly.train.fit`): the model learns the
    peers it is judged on, on a node where some GPUs idle."""
    busy = F.busy(feats.reshape(-1, *feats.shape[-2:])).reshape(feats.shape[:-1])
    mem = feats[..., F.INDEX["mem_ratio"]]
    with np.errstate(invalid="ignore"):
        member = busy | (mem >= MEMBER_MEM)
    part = member.any(axis=-1) & ~member.all(axis=-1)  # (...): windows to take again
    if not part.any():
        return feats
    out = feats.copy()
    sub = out[part]  # (N, G, F)
    mem_k, busy_k = member[part], busy[part]
    ref = mem_k & busy_k
    n_ref = ref.sum(axis=-1, keepdims=True)
    for name, base in F.PEERS.items():
        x = sub[..., F.INDEX[base]]
        with F._quiet():
            med = np.nanmedian(np.where(ref, x, np.nan), axis=-1, keepdims=True)
        peer = np.where(n_ref < 2, np.where(np.isnan(x), np.nan, 0.0), x - med)
        sub[..., F.INDEX[name]] = np.where(mem_k, peer, np.nan)
    sub[..., F.INDEX["peer_util_drops"]] = np.nan
    sub[..., F.INDEX["peer_temp_drift"]] = np.nan
    out[part] = sub
    return out


def start_up_mask(t: np.ndarray, feats: np.ndarray, every: int = 1) -> np.ndarray:
    """``(T, G)`` bool: the windows of each GPU's start-up grace (its first busy window
    on, :data:`WARM_MIN_S` and until settled, at most :data:`GRACE_MAX_S`), found by the
    gate's own transitions stepped every ``every`` ticks (the others False)."""
    gate = Gate(None)
    n, g = feats.shape[:2]
    uuids = [str(k) for k in range(g)]
    out = np.zeros((n, g), dtype=bool)
    busy = F.valid_rows(feats)
    for i in range(0, n, max(1, every)):
        _, _, grace = gate._transit(float(t[i]), uuids, feats[i], busy[i], set())
        if grace:
            out[i] = [u in grace and gate.gpus[u].grace_why == START_UP for u in uuids]
        elif all(st.seen and st.grace_from is None for st in gate.gpus.values()):
            break  # every GPU past its start-up
    return out
