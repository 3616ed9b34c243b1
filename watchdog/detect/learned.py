"""Everything the detector learns from the data, and how it is saved and restored.

Two kinds of learned state, both causal (only samples up to each point count) and carried
across blocks, so that block and tick evaluation learn the same numbers:

* a rule's learned wait, ``for: learned(default=…, min=…, margin=…)``
  (:class:`LearnedWait`, the spec a rule file gives): per rule and node the longest
  pending episode of the rule's condition that ended on its own before firing (a
  legitimate wait such as a checkpoint) is recorded by a :class:`WaitLearner`; the ``for``
  of the next episode is ``max(min, longest + margin)``. Read by the alert states
  (:mod:`state`).
* each GPU's :class:`PowerLevels`: idle and busy power (W), the highest SM clock seen
  (MHz) and the serving rhythm, behind the signals ``power_idle_w``, ``power_busy_w``,
  ``power_rel``, ``sm_clock_pct`` and ``serving`` (:mod:`signals`). Running minima and
  maxima (``np.fmin.accumulate``) are exact, so any split of the input gives the same
  levels.

The live agent persists both as plain JSON-ready dicts (``Detector.learned_state`` and
``Detector.learned_levels``). ``docs/rules.md`` describes them for rule writers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from watchdog.detect.lang import Call, Name
from watchdog.detect.layout import Segments
from watchdog.detect.windows import Window
from watchdog.errors import InputError
from watchdog.units import parse_duration

NAN = np.nan
LEARN_WINDOW_S = 30.0  # smoothing of power/util before learning idle and busy levels
IDLE_UTIL_PCT = 5.0
BUSY_UTIL_PCT = 90.0
IDLE_FALLBACK = 0.10  # of the enforced limit, until an idle level is seen
# serving rhythm (a log without process names): an idle gap with memory held at least this
# long (s) that ended in work is a server's gap between requests; a trainer's checkpoint
# pauses last 30 s to 2 min, and its stalls do not end in work by themselves
SERVER_GAP_S = 300.0
SERVER_GAP_MEMORY_S = 6 * 3600.0  # how long (s) such a gap marks the GPU as serving
SERVER_IDLE_UTIL_PCT = 5.0
SERVER_BUSY_UTIL_PCT = 50.0
SERVER_MIN_MEMORY_MIB = 1024.0


# --- learned waits (a rule's `for: learned(...)`) ------------------------------------------


@dataclass(frozen=True)
class LearnedWait:
    """A rule's ``for: learned(default=…, min=…, margin=…)`` as written (seconds)."""

    default: float
    min: float
    margin: float


def parse_learned_wait(args: str) -> LearnedWait:
    """The inside of ``learned(...)``: ``key=duration`` pairs, ``default`` required."""
    vals: dict[str, float] = {}
    for part in args.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise InputError(f"for: learned({args}): expected key=duration pairs")
        k, v = (s.strip() for s in part.split("=", 1))
        if k not in ("default", "min", "margin"):
            raise InputError(f"for: learned(): unknown parameter {k!r} "
                             "(expected default, min, margin)")
        vals[k] = parse_duration(v, what=f"for: learned({k}=)")
    if "default" not in vals:
        raise InputError("for: learned(): default= is required")
    return LearnedWait(vals["default"], vals.get("min", 0.0), vals.get("margin", 0.0))


@dataclass
class WaitLearner:
    """Longest legitimate episode of a rule's condition on this node (s), for the
    rule's :class:`LearnedWait`."""

    spec: LearnedWait
    longest: float | None = None
    episodes: int = 0

    def effective(self) -> float:
        """The ``for`` to use now: ``max(min, longest + margin)``, or the default."""
        if self.longest is None:
            return self.spec.default
        return max(self.spec.min, self.longest + self.spec.margin)

    def record(self, duration: float) -> None:
        self.episodes += 1
        if self.longest is None or duration > self.longest:
            self.longest = duration

    def to_dict(self) -> dict[str, Any]:
        return {"longest_s": self.longest, "episodes": self.episodes}

    @classmethod
    def from_dict(cls, spec: LearnedWait, d: dict[str, Any]) -> WaitLearner:
        """Inverse of :meth:`to_dict` for a rule whose ``for:`` is ``spec``."""
        out = cls(spec)
        out.load(d)
        return out

    def load(self, d: dict[str, Any]) -> None:
        lo = d.get("longest_s")
        self.longest = None if lo is None else float(lo)
        self.episodes = int(d.get("episodes", 0))


def waits_to_dict(learners: Mapping[str, WaitLearner]) -> dict[str, dict[str, Any]]:
    """Every rule's learned wait by rule name (JSON-ready)."""
    return {name: lr.to_dict() for name, lr in learners.items()}


def load_waits(learners: Mapping[str, WaitLearner], state: dict[str, dict[str, Any]]) -> None:
    """Restore :func:`waits_to_dict` output (rules not in ``learners`` are ignored)."""
    for name, d in state.items():
        lr = learners.get(name)
        if lr is not None:
            lr.load(d)


# --- learned per-GPU levels ---------------------------------------------------------------


@functools.cache
def learn_windows() -> tuple[Any, Any]:
    """The 30 s means of utilization and power the levels are learned from, as window
    expressions (the detector declares them with the rules' windows, so they share work)."""
    return tuple(Call(0, "mean", (Name(0, m),), LEARN_WINDOW_S)
                 for m in ("utilization.gpu", "power.draw"))


class PowerLevels:
    """Learned levels per slot (W, MHz), carried across blocks; grows with new slots.

    ``power_levels=False`` never learns idle and busy power: they stay at their fallbacks
    (10 % of the enforced limit, the limit). ``watchdog check`` judges a burst of a second,
    which holds no history to learn from: a hung GPU's 100 % util at idle power would be
    learned as its "busy" level and hide the hang.
    """

    def __init__(self, power_levels: bool = True) -> None:
        self.power_levels = power_levels
        self.idle_w = np.empty(0)
        self.busy_w = np.empty(0)
        self.max_sm_mhz = np.empty(0)
        self.util_mean = Window("mean", LEARN_WINDOW_S)
        # serving rhythm per slot: start (s) of the current idle-with-memory run, end (s)
        # of the last server-like gap (NaN: none)
        self.idle_since = np.empty(0)
        self.gap_end = np.empty(0)
        self.power_mean = Window("mean", LEARN_WINDOW_S)

    def grow(self, n: int) -> None:
        extra = n - len(self.idle_w)
        if extra > 0:
            pad = np.full(extra, NAN)
            self.idle_w = np.concatenate((self.idle_w, pad))
            self.busy_w = np.concatenate((self.busy_w, pad))
            self.max_sm_mhz = np.concatenate((self.max_sm_mhz, pad))
            self.idle_since = np.concatenate((self.idle_since, pad))
            self.gap_end = np.concatenate((self.gap_end, pad))

    def power(self, seg: Segments, util: np.ndarray, power: np.ndarray,
              limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Idle and busy power (W) at each sample of ``seg``: the running lowest and highest
        30 s mean ``power`` while the 30 s mean ``util`` (%) is below 5 % / above 90 %,
        else the fallbacks (10 % of the enforced ``limit``, the limit; busy capped at it)."""
        if not self.power_levels:  # nothing learned: the fallbacks below
            util = np.full(len(util), NAN)
        idle = _running(seg, np.fmin, self.idle_w, np.where(util < IDLE_UTIL_PCT, power, NAN))
        busy = _running(seg, np.fmax, self.busy_w, np.where(util > BUSY_UTIL_PCT, power, NAN))
        idle = np.where(np.isnan(idle), IDLE_FALLBACK * limit, idle)
        busy = np.where(np.isnan(busy), limit, np.fmin(busy, limit))
        return idle, busy

    def max_sm(self, seg: Segments, clocks_sm: np.ndarray) -> np.ndarray:
        """The highest SM clock (MHz) seen so far at each sample of ``seg``."""
        return _running(seg, np.fmax, self.max_sm_mhz, clocks_sm)

    def serving_rhythm(self, seg: Segments, util: np.ndarray, mem: np.ndarray) -> np.ndarray:
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


def _running(seg: Segments, fn: np.ufunc, carried: np.ndarray,
             cand: np.ndarray) -> np.ndarray:
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
