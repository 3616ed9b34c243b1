"""Derived signals: numbers that make rules portable across GPU models.

Each signal is a float array over one GPU's new samples (NaN = unknown), computed from the
catalogue metrics and the GPU's inventory. Percentages are 0–100 like the metrics. The
learned power levels are causal (they use only samples up to each point) and use running
minima/maxima (``np.fmin.accumulate``), which are exact, so block and tick evaluation give
the same numbers. The table of signals is in ``docs/rules.md``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from watchdog import reasons
from watchdog.detect.windows import Segments, Window
from watchdog.model import DeviceInfo

NAN = np.nan
FLAG_SIGNALS = {name: bit for bit, (name, _) in reasons.REASONS.items()}
BAD_BITS = reasons.THERMAL | reasons.HARDWARE
SIGNALS: tuple[str, ...] = (
    "power_pct", "power_idle_w", "power_busy_w", "power_rel", "mem_pct", "sm_clock_pct",
    "sm_activity", "tensor_activity", *FLAG_SIGNALS, "throttle_bad", "lost", "xid",
    "xid_count", "pcie_width_max", "pcie_gen_max", "serving",
)
# signals whose computation advances learned per-GPU state (running idle/busy power,
# running max SM clock): an expression naming one must be evaluated in every block
LEARNING_SIGNALS = frozenset({"power_idle_w", "power_busy_w", "power_rel", "sm_clock_pct",
                              "serving"})
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


@functools.cache
def learn_windows() -> tuple[Any, Any]:
    """The 30 s means of utilization and power the levels are learned from, as window
    expressions (the detector declares them with the rules' windows, so they share work)."""
    from watchdog.detect.lang import Call, Name  # lang imports this module

    return tuple(Call(0, "mean", (Name(0, m),), LEARN_WINDOW_S)
                 for m in ("utilization.gpu", "power.draw"))


class Learned:
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


class Block(Segments):
    """The new samples of every GPU in a block, concatenated by slot, with lazily
    computed, cached signals.

    ``metrics`` maps catalogue names to arrays (absent metric = not in the dict);
    ``devices[slot]`` is each slot's inventory.
    """

    def __init__(self, ts: np.ndarray, d: np.ndarray, counts: np.ndarray,
                 devices: list[DeviceInfo], metrics: dict[str, np.ndarray], lost: np.ndarray,
                 xid: np.ndarray, xid_count: np.ndarray, learned: Learned) -> None:
        super().__init__(ts, d, counts)
        self.devices = devices
        self.metrics = metrics
        self.lost = lost
        self.xid = xid
        self.xid_count = xid_count
        self.learned = learned
        learned.grow(self.n_slots)
        self.cache: dict[str, np.ndarray] = {}
        self.asof: dict[int, tuple] = {}  # node-grid mapping per slot (see evaluate)
        self.grid_cache: dict[str, np.ndarray] = {}  # node-grid values (see evaluate)
        self.evaluator: Any = None  # the Evaluator of this block, for the learning windows
        self._bits_cache: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def metric(self, name: str) -> np.ndarray:
        """A catalogue metric (NaN where missing or when the GPU is lost)."""
        arr = self.metrics.get(name)
        if arr is None:
            return np.full(len(self.ts), NAN)
        return arr

    def value(self, name: str) -> np.ndarray:
        """A metric or signal by name (cached for the block)."""
        got = self.cache.get(name)
        if got is None:
            got = self._signal(name) if name in SIGNALS else self.metric(name)
            self.cache[name] = got
        return got

    def _device(self, field: str) -> np.ndarray:
        """A per-row array of an inventory field (NaN where unknown or 0)."""
        key = "§dev:" + field
        got = self.cache.get(key)
        if got is None:
            per_slot = np.array([getattr(d, field) or NAN for d in self.devices], dtype=float)
            got = self.cache[key] = per_slot[self.gi]
        return got

    def _limit(self) -> np.ndarray:
        """The enforced power limit per sample (W), from the log or the inventory."""
        got = self.cache.get("§limit")
        if got is None:
            lim = self.metric("enforced.power.limit")
            lim = np.where(np.isnan(lim), self._device("power_limit_enforced_w"), lim)
            got = self.cache["§limit"] = np.where(lim > 0, lim, NAN)
        return got

    def _signal(self, name: str) -> np.ndarray:
        n = len(self.ts)
        with np.errstate(invalid="ignore", divide="ignore"):
            if name == "power_pct":
                return 100.0 * self.metric("power.draw") / self._limit()
            if name in ("power_idle_w", "power_busy_w"):
                self._learn_power()
                return self.cache[name]
            if name == "power_rel":
                idle, busy = self.value("power_idle_w"), self.value("power_busy_w")
                span = busy - idle
                return np.where(span > 0, 100.0 * (self.metric("power.draw") - idle) / span, NAN)
            if name == "mem_pct":
                total = self.metric("memory.total")
                total = np.where(np.isnan(total), self._device("memory_total_mib"), total)
                return np.where(total > 0, 100.0 * self.metric("memory.used") / total, NAN)
            if name == "sm_clock_pct":
                return 100.0 * self.metric("clocks.sm") / self._max_sm()
        if name == "pcie_width_max":  # what this GPU in this slot can reach (inventory)
            return self._device("pcie_max_width")
        if name == "pcie_gen_max":
            return self._device("pcie_max_gen")
        if name == "serving":
            return self._serving()
        if name == "sm_activity":
            return self.metric("gpm.sm_activity")
        if name == "tensor_activity":
            return self.metric("gpm.tensor_activity")
        if name in FLAG_SIGNALS or name == "throttle_bad":
            ok, bits = self._bits()
            want = FLAG_SIGNALS.get(name, BAD_BITS)
            return np.where(ok, ((bits & want) != 0).astype(np.float64), NAN)
        if name == "lost":
            return self.lost.astype(np.float64)
        if name == "xid":
            return self.xid
        if name == "xid_count":
            return self.xid_count
        return np.full(n, NAN)  # pragma: no cover - names are checked at load

    def _bits(self) -> tuple[np.ndarray, np.ndarray]:
        """The clock-event reasons mask as integers (0 where unknown) and where it is known,
        decoded once per block for every flag."""
        got = self._bits_cache
        if got is None:
            mask = self.metric("clocks_event_reasons.active")
            ok = ~np.isnan(mask)
            got = self._bits_cache = (ok, np.where(ok, mask, 0).astype(np.int64))
        return got

    def _running(self, fn: np.ufunc, carried: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """Per-slot running ``fn`` (fmin/fmax) of ``cand`` from ``carried``; updates it."""
        out = np.empty(len(cand))
        for g in np.flatnonzero(self.counts):
            lo, hi = self.offsets[g], self.offsets[g + 1]
            run = fn.accumulate(np.concatenate(([carried[g]], cand[lo:hi])))
            carried[g] = run[-1]
            out[lo:hi] = run[1:]
        return out

    def _serving(self) -> np.ndarray:
        """1 = an inference server holds the GPU, 0 = its processes are known and none
        serves, NaN = cannot tell.

        Live, from the processes (``processes.serving``, :mod:`watchdog.serving`). Where
        that is unknown (a log), from the usage rhythm: 1 for :data:`SERVER_GAP_MEMORY_S`
        after an idle gap of :data:`SERVER_GAP_S` or more with memory held ended in work
        (util >= 50 %): a server waits between requests and serves again, a trainer's
        pauses are short. Causal and carried across blocks (block == tick)."""
        known = self.metric("processes.serving")
        util, mem = self.metric("utilization.gpu"), self.metric("memory.used")
        idle = (util < SERVER_IDLE_UTIL_PCT) & (mem >= SERVER_MIN_MEMORY_MIB)
        busy = util >= SERVER_BUSY_UTIL_PCT
        lr = self.learned
        if not idle.any() and np.isnan(lr.idle_since[self.gi]).all():
            # no idle run in or into this block (a busy node): no gap can end here
            with np.errstate(invalid="ignore"):
                near = self.ts - lr.gap_end[self.gi] <= SERVER_GAP_MEMORY_S
            return np.where(np.isnan(known), np.where(near, 1.0, NAN), known)
        out = np.full(len(self.ts), NAN)
        for g in np.flatnonzero(self.counts):
            lo, hi = self.offsets[g], self.offsets[g + 1]
            since, gap_end = lr.idle_since[g], lr.gap_end[g]
            ts, ig, bg = self.ts[lo:hi], idle[lo:hi], busy[lo:hi]
            prev = np.concatenate(([not np.isnan(since)], ig[:-1]))
            # start (s) of the idle run each sample is in or has just ended
            first = np.maximum.accumulate(np.where(ig & ~prev, np.arange(len(ts)), -1))
            run_start = np.where(first >= 0, ts[np.maximum(first, 0)], since)
            ends = prev & ~ig & bg & (ts - run_start >= SERVER_GAP_S)
            last_gap = np.fmax.accumulate(np.concatenate(([gap_end], np.where(ends, ts, NAN))))
            with np.errstate(invalid="ignore"):
                out[lo:hi] = np.where(ts - last_gap[1:] <= SERVER_GAP_MEMORY_S, 1.0, NAN)
            lr.idle_since[g] = run_start[-1] if ig[-1] else NAN
            lr.gap_end[g] = last_gap[-1]
        return np.where(np.isnan(known), out, known)

    def _max_sm(self) -> np.ndarray:
        dev = self._device("clocks_max_sm_mhz")
        seen = self._running(np.fmax, self.learned.max_sm_mhz, self.metric("clocks.sm"))
        out = np.where(np.isnan(dev), seen, dev)
        return np.where(out > 0, out, NAN)

    def _learn_power(self) -> None:
        """Running idle (min) and busy (max) 30 s mean power, gated by 30 s mean util."""
        lr = self.learned
        if self.evaluator is not None:
            util_w, power_w = learn_windows()
            util = self.evaluator.sample(util_w, self)
            power = self.evaluator.sample(power_w, self)
        else:  # a bare block (tests): the learned windows of its own
            util = lr.util_mean.update_block(self, self.metric("utilization.gpu"))
            power = lr.power_mean.update_block(self, self.metric("power.draw"))
        if not lr.power_levels:  # nothing learned: the fallbacks below
            util = np.full(len(util), NAN)
        idle = self._running(np.fmin, lr.idle_w, np.where(util < IDLE_UTIL_PCT, power, NAN))
        busy = self._running(np.fmax, lr.busy_w, np.where(util > BUSY_UTIL_PCT, power, NAN))
        limit = self._limit()
        idle = np.where(np.isnan(idle), IDLE_FALLBACK * limit, idle)
        busy = np.where(np.isnan(busy), limit, np.fmin(busy, limit))
        self.cache["power_idle_w"] = idle
        self.cache["power_busy_w"] = busy
