"""What the detector learns of each GPU from the data, and how it is saved and restored
(a rule's learned wait is :mod:`watchdog.detect.waits`).

Causal (only samples up to each point count) and carried across blocks, so that block and
tick evaluation learn the same numbers:

* each GPU's :class:`PowerLevels`: idle and busy power (W), the highest SM clock seen
  (MHz), the serving rhythm, the highest temperature seen while working (C) and the work
  done before the latest idle run (%), behind the signals ``power_idle_w``,
  ``power_busy_w``, ``power_rel``, ``sm_clock_pct``, ``serving``, ``temp_work_max_c`` and
  ``work_before_idle`` (:mod:`signals`). Running minima and maxima
  (``np.fmin.accumulate``) are exact, so any split of the input gives the same levels.

What each level is, and what cannot teach it something false:

* **idle** (W): the lowest 30 s mean power over 30 s in which the GPU ran nothing (mean
  utilization < 5 %). Where the node shows a GPU with no process, that is its floor without
  a CUDA context (H100 74 W, H200 79 W in ``real-gpu``); a node only ever seen with a
  context open learns that instead (H100 122 W). Both lie far below work (2.5x and more),
  and a spinning kernel draws about the context's level, so the hang rule's lines (idle
  + 25 % of busy - idle, and 2.5x idle) sit above a hang either way. Nothing busy can
  lower it.
* **busy** (W): the highest power the GPU held through a window of *working* readings
  (:func:`working`: the reading's own utilization >= 90 %, its power >= 2.5x idle, and
  GPM SM activity >= 15 % where the GPU reports it): the running maximum of the mean
  working reading of each window of 30 s (or of :data:`BUSY_MIN_READINGS` sampling
  intervals on a sparse log), counted only where working readings fill a third of the
  window and are at least three. A single reading never sets it: at 30 s sampling the
  highest reading of a 3-hour run lay above 99 % of its working readings. A window mean
  of utilization and power would blend work with idle gaps and spinning: on a real H200
  whose utilization aliases at 1 Hz (100 % and 0 % from one reading to the next while it
  draws 520-690 W),
  the 30 s utilization mean passes 90 % only where a busy-wait fills the window, and a
  window of 28 s of spin and 2 s of work taught "busy 203 W", which hid the next hang.
  Readings are judged one by one, so neither aliasing nor a wait nor an idle gap enters
  the level; a job whose first minutes are light learns their level, and the running
  maximum rises with its heavier phase.
* **the highest SM clock** (MHz): the running maximum of ``clocks.sm`` where the
  inventory does not give it. A log that starts throttled learns a low maximum until the
  clocks come up (a throttle is then missed for a while, never invented).
* **the temperature while working** (C): the highest temperature at a working reading
  (:func:`working` at :data:`WARM_UTIL_PCT` utilization or more, without the power test
  where power is not logged), 10 minutes after it was seen; a spinning kernel is not
  work and never teaches it. Half utilization, not the busy level's 90 %: a job that never
  runs that busy (a V100 fine-tune at 45-60 %, an A100 PCIe one at 62-81 %, sampled every
  30 s by W&B) otherwise never learns it, and its thermal slowdown cannot be judged. More
  readings count, so the level can only be higher (the rule firing later, never sooner)
  where a GPU has busier readings too.
* a rule's **learned wait** (:class:`WaitLearner`): the longest episode of its condition
  that ended on its own before it fired, so it grows by at most the rule's margin at a
  time; aliased utilization never holds the hang rule's 15 s mean at 95 %.

The levels are the GPU's, not the job's: a new job does not re-learn them (its work draws
at most the busiest level seen, and a hang draws a few % of that range whatever the job).
Stored levels carry :data:`LEVELS_VERSION`; levels stored under another definition are
dropped when the agent starts (:func:`trusted_levels`), and the GPU learns them again.

The live agent persists both as plain JSON-ready dicts (``Detector.learned_state`` and
``Detector.learned_levels``). ``docs/rules.md`` describes them for rule writers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from watchdog.detect.lang import Binary, Call, Name, Num
from watchdog.detect.layout import Segments
from watchdog.detect.windows import Window
from watchdog.untyped import Array

NAN = np.nan
#: Version of the definition of the learned levels; levels stored under another are not
#: trusted (version 1 learned busy power from 30 s means of utilization and power, which
#: blended work with spinning: a real H200 stored 203 W for work at 520-690 W).
LEVELS_VERSION = 2
LEARN_WINDOW_S = 30.0  # smoothing of power/util before learning idle and busy levels
IDLE_UTIL_PCT = 5.0
# a reading is working (:func:`working`) at this utilization or more ...
BUSY_UTIL_PCT = 90.0
# ... drawing at least this many times the idle level (learned, else the fixed
# fallbacks): a hung GPU at 100 % util draws 1.4-1.8x idle (H100 123-132 W of 74 W,
# real-gpu/h100-spin-hang; H200 122 W of 79 W; V100 40-47 W, horovod#3611) and must not
# become its own busy level; real work at 100 % draws 5x and more (H100 390-690 W, A100
# PCIe 165-245 W of 35 W)
BUSY_OVER_IDLE = 2.5
# ... and, where GPM is read, with at least this SM activity (%): a busy-wait kernel shows
# 0.8 % (real-gpu/h200-spin-hang), training 75 %
BUSY_SM_ACTIVITY_PCT = 15.0
# a reading teaches the temperature while working at this utilization or more (with the
# power and GPM tests of :func:`working`): the model's "at work" line
WARM_UTIL_PCT = 50.0
# a window teaches the busy level only where working readings fill this share of it (an
# H200 whose utilization aliases at 1 Hz shows about half its readings at 100 %) and are
# at least this many: the level is their mean, so a stray reading never sets it
BUSY_MIN_SHARE = 1.0 / 3.0
BUSY_MIN_READINGS = 3
# the highest temperature seen while working counts from this long after it was seen
# (s): a cooling fault's own climb (a minute or two) never raises its reference
WORK_TEMP_DELAY_S = 600.0
# work before an idle run: the share of this window (s) in which util was >= 5 %. Half an
# hour tells a trainer (90-100 %: micro-dips stay above 5 %, a 2 min checkpoint every half
# hour leaves 93 %) from work in bursts (real RL with CPU-bound rollouts 8-19 %, real
# notebooks and debugging sessions, another user's on-and-off job 78 %; a vLLM server
# answering in bursts 25-43 %): five minutes held a 2-minute RL burst at 50 % and more
WORK_WINDOW_S = 1800.0
WORK_BUSY_PCT = 5.0
# ... counted only once the window holds this much of the job (s: time with memory held,
# gaps in the sampling not counted): a share over less history cannot tell a burst from
# steady work (a notebook's first cell from a trainer's start; real runs paged after 3-6
# min of history)
WORK_MIN_HISTORY_S = 600.0
# serving rhythm (a log without process names): an idle gap with memory held at least this
# long (s) that ended in work is a server's gap between requests; a trainer's checkpoint
# pauses last 30 s to 2 min, and its stalls do not end in work by themselves
SERVER_GAP_S = 300.0
SERVER_GAP_MEMORY_S = 6 * 3600.0  # how long (s) such a gap marks the GPU as serving
SERVER_IDLE_UTIL_PCT = 5.0
SERVER_BUSY_UTIL_PCT = 50.0
SERVER_MIN_MEMORY_MIB = 1024.0


# --- learned per-GPU levels ---------------------------------------------------------------


@functools.cache
def work_window() -> tuple[Call, Call]:
    """Over the last 30 min, the share of the time (%) in which a job held the GPU (memory
    used >= 1 GiB) and it worked (utilization >= 5 %), and the share in which a job held
    it with its utilization read: their ratio is the share of the job's time it worked,
    and the second, times the time observed, is how much of the job the window holds. Time
    before the job (no process, memory free) and readings without utilization (a W&B record
    of other stats) are neither work nor idleness."""
    util, mem = Name(0, "utilization.gpu"), Name(0, "memory.used")
    held = Binary(0, ">=", mem, Num(0, SERVER_MIN_MEMORY_MIB))
    worked = Binary(0, "and", Binary(0, ">=", util, Num(0, WORK_BUSY_PCT)), held)
    read = Binary(0, "and", Call(0, "present", (util,)), held)
    return (Call(0, "frac", (worked,), WORK_WINDOW_S), Call(0, "frac", (read,), WORK_WINDOW_S))


def working(util: Array, power: Array, sm_activity: Array,
            idle: Array, util_pct: float = BUSY_UTIL_PCT) -> Array:
    """Readings at which the GPU works, one by one (bool): utilization (%) >= ``util_pct``
    (:data:`BUSY_UTIL_PCT`, 90, for the busy level), and
    neither power (W) under :data:`BUSY_OVER_IDLE` times ``idle`` (W) nor GPM SM activity
    (%) under :data:`BUSY_SM_ACTIVITY_PCT`, each test skipped where its value is unknown
    (NaN). A reading, not a window: 1 Hz utilization that aliases between 100 and 0 % and
    the busy-wait of a hung collective (100 % at 1.5x idle, SM activity near 0) are told
    apart reading by reading."""
    with np.errstate(invalid="ignore"):
        return ((util >= util_pct) & ~(power < BUSY_OVER_IDLE * idle)
                & ~(sm_activity < BUSY_SM_ACTIVITY_PCT))


@functools.cache
def learn_windows() -> tuple[Call, Call]:
    """The 30 s means of utilization and power the levels are learned from, as window
    expressions (the detector declares them with the rules' windows, so they share work)."""
    util, power = (Call(0, "mean", (Name(0, m),), LEARN_WINDOW_S)
                   for m in ("utilization.gpu", "power.draw"))
    return util, power


class PowerLevels:
    """Learned levels per slot (W, MHz), carried across blocks; grows with new slots.

    ``power_levels=False`` never learns idle and busy power: they stay at their fallbacks
    (:mod:`fallbacks`: 10 % of the limit, the limit). ``watchdog check`` judges a burst of
    a second, which holds no history to learn from: a hung GPU's 100 % util at idle power
    would be learned as its "busy" level and hide the hang.
    """

    def __init__(self, power_levels: bool = True, interval: float | None = None) -> None:
        """``interval`` (s): the input's sampling interval where known (a log's); the busy
        level's window holds :data:`BUSY_MIN_READINGS` of them (30 s at least)."""
        self.power_levels = power_levels
        step = interval if interval and interval > 0 else 1.0
        self.busy_window_s = max(LEARN_WINDOW_S, BUSY_MIN_READINGS * step)
        # share of the window the working readings fill: a third, and 3 readings' worth
        self.busy_share_pct = 100.0 * max(BUSY_MIN_SHARE,
                                          BUSY_MIN_READINGS * step / self.busy_window_s)
        self.idle_w = np.empty(0)
        self.busy_w = np.empty(0)
        self.max_sm_mhz = np.empty(0)
        self.util_mean = Window("mean", LEARN_WINDOW_S)
        # the busy level's window: the mean power of its working readings, their share
        self.work_power = Window("mean", self.busy_window_s)
        self.work_share_w = Window("frac", self.busy_window_s)
        # serving rhythm per slot: start (s) of the current idle-with-memory run, end (s)
        # of the last server-like gap (NaN: none)
        self.idle_since = np.empty(0)
        self.gap_end = np.empty(0)
        self.power_mean = Window("mean", LEARN_WINDOW_S)
        # bare blocks (tests) only: the work window's two fracs
        self.work_mean = Window("frac", WORK_WINDOW_S)
        self.read_mean = Window("frac", WORK_WINDOW_S)
        self.work_share = np.empty(0)  # work_before_idle held through an idle run
        self.observed = np.empty(0)  # seconds each GPU was observed (see watched)
        self._watched: tuple[Segments, Array] | None = None  # this block's, computed once
        # highest temperature while working: running max, and its rises (time, value)
        self.work_temp = np.empty(0)
        self.work_temp_hist: list[tuple[Array, Array]] = []
        # when each level was first known (s; NaN: not yet), for the coverage notes
        self.since: dict[str, Array] = {k: np.empty(0) for k in
                                             ("idle", "busy", "temp", "work", "seen")}

    def grow(self, n: int) -> None:
        extra = n - len(self.idle_w)
        if extra > 0:
            pad = np.full(extra, NAN)
            self.idle_w = np.concatenate((self.idle_w, pad))
            self.busy_w = np.concatenate((self.busy_w, pad))
            self.max_sm_mhz = np.concatenate((self.max_sm_mhz, pad))
            self.idle_since = np.concatenate((self.idle_since, pad))
            self.gap_end = np.concatenate((self.gap_end, pad))
            self.work_share = np.concatenate((self.work_share, pad))
            self.observed = np.concatenate((self.observed, np.zeros(extra)))
            self.work_temp = np.concatenate((self.work_temp, pad))
            self.work_temp_hist.extend((np.empty(0), np.empty(0)) for _ in range(extra))
            for k, v in self.since.items():
                self.since[k] = np.concatenate((v, pad))

    def power(self, seg: Segments, util: Array, power: Array,
              idle_ref: Array, reading: tuple[Array, Array, Array]
              ) -> tuple[Array, Array, Array]:
        """Learned idle and busy power (W) at each sample of ``seg`` (NaN where nothing is
        learned yet), and which readings were working at :data:`WARM_UTIL_PCT` (bool:
        they teach the temperature while working).

        Idle: the running lowest 30 s mean ``power`` while the 30 s mean ``util`` (%) is
        below 5 %. Busy: the running highest of each window's mean working reading
        (:func:`working` on ``reading`` = the reading's own utilization (%), power (W) and
        GPM SM activity (%), against the idle level learned so far, else ``idle_ref``; no
        power test where neither is known) where they fill its share (a third, and three
        readings: ``busy_share_pct``). The fallbacks are the caller's."""
        r_util, r_power, r_sm = reading
        if not self.power_levels:  # nothing learned: the caller's fallbacks
            util = np.full(len(util), NAN)
            r_util = util
        idle = _running(seg, np.fmin, self.idle_w, np.where(util < IDLE_UTIL_PCT, power, NAN))
        ref = np.where(np.isnan(idle), idle_ref, idle)
        warm = working(r_util, r_power, r_sm, ref, WARM_UTIL_PCT)
        with np.errstate(invalid="ignore"):
            work = warm & (r_util >= BUSY_UTIL_PCT)  # the same tests at the busy level
        mean = self.work_power.update_block(seg, np.where(work, r_power, NAN))
        share = self.work_share_w.update_block(seg, work.astype(np.float64))  # %
        busy = _running(seg, np.fmax, self.busy_w,
                        np.where(share >= self.busy_share_pct, mean, NAN))
        _first(seg, idle, self.since["idle"])
        _first(seg, busy, self.since["busy"])
        return idle, busy, warm

    def work_temperature(self, seg: Segments, work: Array,
                         temp: Array) -> Array:
        """The highest temperature (C) the GPU showed at a working reading (``work``,
        :func:`working`) up to :data:`WORK_TEMP_DELAY_S` before each sample of ``seg``
        (NaN before)."""
        cand = np.where(work, temp, NAN)
        out = np.full(len(seg.ts), NAN)
        for g in np.flatnonzero(seg.counts):
            lo, hi = seg.offsets[g], seg.offsets[g + 1]
            ts = seg.ts[lo:hi]
            run = np.fmax.accumulate(np.concatenate(([self.work_temp[g]], cand[lo:hi])))
            rise = np.flatnonzero(~(run[1:] <= run[:-1]) & ~np.isnan(run[1:]))
            h_ts, h_v = self.work_temp_hist[g]
            h_ts = np.concatenate((h_ts, ts[rise]))
            h_v = np.concatenate((h_v, run[1:][rise]))
            q = ts - WORK_TEMP_DELAY_S
            at = np.searchsorted(h_ts, q, side="right") - 1
            if len(h_v):
                out[lo:hi] = np.where(at >= 0, h_v[np.maximum(at, 0)], NAN)
                if np.isnan(self.since["temp"][g]):
                    self.since["temp"][g] = h_ts[0] + WORK_TEMP_DELAY_S
            keep = max(int(np.searchsorted(h_ts, q[-1], side="right")) - 1, 0)
            self.work_temp_hist[g] = (h_ts[keep:], h_v[keep:])
            self.work_temp[g] = run[-1]
        return out

    def watched(self, seg: Segments) -> Array:
        """Seconds each GPU has been observed, at each sample of ``seg``: the sum of its
        samples' weights ``d`` (each the gap to the previous sample, capped at the
        detector's ``max_gap``), so a gap in the sampling is not history. It is the history
        a window of that length actually holds: at the start of a log or of the agent, or
        after a long gap, a 15 min window holds less. Carried across blocks (computed
        once per block; every caller gets the same numbers)."""
        if self._watched is not None and self._watched[0] is seg:
            return self._watched[1]
        seen = self.since["seen"]
        for g in np.flatnonzero((seg.counts > 0) & np.isnan(seen[:len(seg.counts)])):
            seen[g] = seg.ts[seg.offsets[g]]
        out = np.empty(len(seg.ts))
        for g in np.flatnonzero(seg.counts):
            lo, hi = seg.offsets[g], seg.offsets[g + 1]
            run = np.cumsum(np.concatenate(([self.observed[g]], seg.d[lo:hi])))
            out[lo:hi] = run[1:]
            self.observed[g] = run[-1]
        self._watched = (seg, out)
        return out

    def work_before_idle(self, seg: Segments, util: Array, worked: Array,
                         read: Array) -> Array:
        """At a working sample (util >= 5 %), the share (%) of the job's time in the last
        30 min that the GPU worked (:func:`work_window`'s fracs ``worked`` / ``read``, %);
        at an idle one, that share as it was at the last working sample (carried across
        blocks; where util is missing the value is held). NaN while the window holds less
        than :data:`WORK_MIN_HISTORY_S` of the job (its share of the window, times the
        time observed up to 30 min)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(read > 0, 100.0 * worked / read, NAN)
            job_s = read / 100.0 * np.minimum(self.watched(seg), WORK_WINDOW_S)
        work = util >= WORK_BUSY_PCT
        share = np.where(job_s >= WORK_MIN_HISTORY_S, share, NAN)
        out = np.full(len(seg.ts), NAN)
        for g in np.flatnonzero(seg.counts):
            lo, hi = seg.offsets[g], seg.offsets[g + 1]
            w = work[lo:hi]
            last = np.maximum.accumulate(np.where(w, np.arange(hi - lo), -1))
            vals = share[lo:hi]
            out[lo:hi] = np.where(last >= 0, vals[np.maximum(last, 0)], self.work_share[g])
            self.work_share[g] = out[hi - 1]
        _first(seg, np.where(work, share, NAN), self.since["work"])
        return out

    def max_sm(self, seg: Segments, clocks_sm: Array) -> Array:
        """The highest SM clock (MHz) seen so far at each sample of ``seg``."""
        return _running(seg, np.fmax, self.max_sm_mhz, clocks_sm)

    def serving_rhythm(self, seg: Segments, util: Array, mem: Array) -> Array:
        """1 for :data:`SERVER_GAP_MEMORY_S` after an idle gap of :data:`SERVER_GAP_S` or
        more with memory held (util < 5 %, memory.used ``mem`` >= 1 GiB) that ended in work
        (util >= 50 %), else NaN: a server waits between requests and serves again, a
        trainer's pauses are short. ``util`` in %, ``mem`` in MiB."""
        idle = (util < SERVER_IDLE_UTIL_PCT) & (mem >= SERVER_MIN_MEMORY_MIB)
        busy = util >= SERVER_BUSY_UTIL_PCT
        if not idle.any() and np.isnan(self.idle_since[seg.gi]).all():
            # no idle run in or into this block (a busy node): no gap can end here
            with np.errstate(invalid="ignore"):
                near = seg.ts - self.gap_end[seg.gi] <= SERVER_GAP_MEMORY_S
            return np.where(near, 1.0, NAN)
        out = np.full(len(seg.ts), NAN)
        for g in np.flatnonzero(seg.counts):
            lo, hi = seg.offsets[g], seg.offsets[g + 1]
            since, gap_end = self.idle_since[g], self.gap_end[g]
            ts, ig, bg = seg.ts[lo:hi], idle[lo:hi], busy[lo:hi]
            prev = np.concatenate(([not np.isnan(since)], ig[:-1]))
            # start (s) of the idle run each sample is in or has just ended
            first = np.maximum.accumulate(np.where(ig & ~prev, np.arange(len(ts)), -1))
            run_start = np.where(first >= 0, ts[np.maximum(first, 0)], since)
            ends = prev & ~ig & bg & (ts - run_start >= SERVER_GAP_S)
            last_gap = np.fmax.accumulate(np.concatenate(([gap_end], np.where(ends, ts, NAN))))
            with np.errstate(invalid="ignore"):
                out[lo:hi] = np.where(ts - last_gap[1:] <= SERVER_GAP_MEMORY_S, 1.0, NAN)
            self.idle_since[g] = run_start[-1] if ig[-1] else NAN
            self.gap_end[g] = last_gap[-1]
        return out

    def to_dict(self, uuids: Sequence[str]) -> dict[str, dict[str, float | None]]:
        """Each GPU's idle and busy power (W) and highest SM clock (MHz) by UUID (None where
        nothing was learned yet); ``uuids`` are the GPUs in slot order."""
        self.grow(len(uuids))
        return {u: {"idle_w": _opt(self.idle_w[s]), "busy_w": _opt(self.busy_w[s]),
                    "max_sm_mhz": _opt(self.max_sm_mhz[s])} for s, u in enumerate(uuids)}

    def load(self, levels: dict[str, dict[str, float | None]], uuids: Sequence[str]) -> None:
        """Restore :meth:`to_dict` output for the GPUs of ``uuids`` (slot order; others
        are ignored). Learning goes on from the restored levels."""
        self.grow(len(uuids))
        for s, u in enumerate(uuids):
            lv = levels.get(u)
            if not lv:
                continue
            for key, arr in (("idle_w", self.idle_w), ("busy_w", self.busy_w),
                             ("max_sm_mhz", self.max_sm_mhz)):
                v = lv.get(key)
                if v is not None and math.isfinite(v):
                    arr[s] = float(v)


def trusted_levels(levels: Mapping[str, Mapping[str, float | None]]
                   ) -> tuple[dict[str, dict[str, float | None]], list[str]]:
    """The stored levels (by GPU UUID, as the store reads them, each with its
    ``version``) that a detector may restore, and one line per GPU whose levels were
    dropped, saying why.

    Levels learned under another :data:`LEVELS_VERSION` are dropped whole: an older
    definition could store a busy level that describes spinning rather than work (a
    real H200 stored 203 W for work at 520-690 W and missed its next hang), and a
    running maximum restored from it would never come down. A busy level under
    :data:`BUSY_OVER_IDLE` times the idle level is no work either, whatever its version.
    The GPU learns what was dropped again. Learned waits are kept: a busy level too low
    only ever made the hang condition rarer, so a wait learned under it is shorter than
    the true one, never longer."""
    kept: dict[str, dict[str, float | None]] = {}
    notes: list[str] = []
    for uuid, lv in levels.items():
        version = lv.get("version")
        if version != LEVELS_VERSION:
            notes.append(f"{uuid}: levels stored by an older version (definition "
                         f"{version}, now {LEVELS_VERSION}) dropped")
            continue
        got = {k: _finite(lv.get(k)) for k in ("idle_w", "busy_w", "max_sm_mhz")}
        idle, busy = got["idle_w"], got["busy_w"]
        if busy is not None and idle is not None and busy < BUSY_OVER_IDLE * idle:
            notes.append(f"{uuid}: stored busy level {busy:.0f} W is under "
                         f"{BUSY_OVER_IDLE:g}x its idle {idle:.0f} W, not work: dropped")
            got["busy_w"] = None
        kept[uuid] = got
    return kept, notes


def _finite(v: float | None) -> float | None:
    """A stored number, None where it is missing, not a number or not above 0."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _first(seg: Segments, vals: Array, since: Array) -> None:
    """Set ``since[slot]`` to the time of the slot's first valid value in ``vals`` where it
    is not set yet."""
    for g in np.flatnonzero((seg.counts > 0) & np.isnan(since[:len(seg.counts)])):
        lo, hi = seg.offsets[g], seg.offsets[g + 1]
        ok = np.flatnonzero(~np.isnan(vals[lo:hi]))
        if len(ok):
            since[g] = seg.ts[lo + ok[0]]


def _running(seg: Segments, fn: np.ufunc, carried: Array,
             cand: Array) -> Array:
    """Per-slot running ``fn`` (fmin/fmax) of ``cand`` from ``carried``; updates it."""
    out = np.empty(len(cand))
    for g in np.flatnonzero(seg.counts):
        lo, hi = seg.offsets[g], seg.offsets[g + 1]
        run = fn.accumulate(np.concatenate(([carried[g]], cand[lo:hi])))
        carried[g] = run[-1]
        out[lo:hi] = run[1:]
    return out


def _opt(v: float) -> float | None:
    """A learned value, None when not learned (NaN)."""
    return None if math.isnan(v) else float(v)
