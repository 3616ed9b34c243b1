"""Derived signals: numbers that make rules portable across GPU models.

Each signal is a float array over one GPU's new samples (NaN = unknown), computed from the
catalogue metrics and the GPU's inventory. Percentages are 0–100 like the metrics. The
learned power levels are causal (they use only samples up to each point) and use running
minima/maxima (``np.fmin.accumulate``), which are exact, so block and tick evaluation give
the same numbers. The table of signals is in ``docs/rules.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from watchdog import reasons
from watchdog.detect.windows import Window
from watchdog.model import DeviceInfo

NAN = np.nan
FLAG_SIGNALS = {name: bit for bit, (name, _) in reasons.REASONS.items()}
BAD_BITS = reasons.THERMAL | reasons.HARDWARE
SIGNALS: tuple[str, ...] = (
    "power_pct", "power_idle_w", "power_busy_w", "power_rel", "mem_pct", "sm_clock_pct",
    "sm_activity", "tensor_activity", *FLAG_SIGNALS, "throttle_bad", "lost", "xid",
    "xid_count",
)
LEARN_WINDOW_S = 30.0  # smoothing of power/util before learning idle and busy levels
IDLE_UTIL_PCT = 5.0
BUSY_UTIL_PCT = 90.0
IDLE_FALLBACK = 0.10  # of the enforced limit, until an idle level is seen


@dataclass
class GpuLearned:
    """Per-GPU learned levels, carried across blocks (W, MHz)."""

    idle_w: float = NAN
    busy_w: float = NAN
    max_sm_mhz: float = NAN
    util_mean: Window = field(default_factory=lambda: Window("mean", LEARN_WINDOW_S))
    power_mean: Window = field(default_factory=lambda: Window("mean", LEARN_WINDOW_S))


class GpuBlock:
    """One GPU's new samples in a block, with lazily computed, cached signals.

    ``metrics`` maps catalogue names to arrays (absent metric = not in the dict).
    """

    def __init__(self, uuid: str, device: DeviceInfo, ts: np.ndarray, d: np.ndarray,
                 metrics: dict[str, np.ndarray], lost: np.ndarray, xid: np.ndarray,
                 xid_count: np.ndarray, learned: GpuLearned) -> None:
        self.uuid = uuid
        self.device = device
        self.ts = ts
        self.d = d
        self.metrics = metrics
        self.lost = lost
        self.xid = xid
        self.xid_count = xid_count
        self.learned = learned
        self.cache: dict[str, np.ndarray] = {}
        self.starts: dict[float, np.ndarray] = {}  # window start indices per width
        self.asof: tuple | None = None  # node-grid mapping cache (see evaluate)

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

    def _limit(self) -> np.ndarray:
        lim = self.metric("enforced.power.limit")
        dev = self.device.power_limit_enforced_w
        if dev is not None:
            lim = np.where(np.isnan(lim), float(dev), lim)
        return np.where(lim > 0, lim, NAN)

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
                if self.device.memory_total_mib:
                    total = np.where(np.isnan(total), self.device.memory_total_mib, total)
                return np.where(total > 0, 100.0 * self.metric("memory.used") / total, NAN)
            if name == "sm_clock_pct":
                return 100.0 * self.metric("clocks.sm") / self._max_sm()
        if name == "sm_activity":
            return self.metric("gpm.sm_activity")
        if name == "tensor_activity":
            return self.metric("gpm.tensor_activity")
        if name in FLAG_SIGNALS or name == "throttle_bad":
            mask = self.metric("clocks_event_reasons.active")
            ok = ~np.isnan(mask)
            bits = np.where(ok, mask, 0).astype(np.int64)
            want = FLAG_SIGNALS.get(name, BAD_BITS)
            return np.where(ok, ((bits & want) != 0).astype(np.float64), NAN)
        if name == "lost":
            return self.lost.astype(np.float64)
        if name == "xid":
            return self.xid
        if name == "xid_count":
            return self.xid_count
        return np.full(n, NAN)  # pragma: no cover - names are checked at load

    def _max_sm(self) -> np.ndarray:
        if self.device.clocks_max_sm_mhz:
            return np.full(len(self.ts), float(self.device.clocks_max_sm_mhz))
        seen = np.fmax.accumulate(np.concatenate(([self.learned.max_sm_mhz],
                                                  self.metric("clocks.sm"))))
        self.learned.max_sm_mhz = float(seen[-1])
        return np.where(seen[1:] > 0, seen[1:], NAN)

    def _learn_power(self) -> None:
        """Running idle (min) and busy (max) 30 s mean power, gated by 30 s mean util."""
        lr = self.learned
        util = lr.util_mean.update(self.uuid, self.ts, self.d, self.metric("utilization.gpu"),
                                   self.starts)
        power = lr.power_mean.update(self.uuid, self.ts, self.d, self.metric("power.draw"),
                                     self.starts)
        idle_cand = np.where(util < IDLE_UTIL_PCT, power, NAN)
        busy_cand = np.where(util > BUSY_UTIL_PCT, power, NAN)
        idle = np.fmin.accumulate(np.concatenate(([lr.idle_w], idle_cand)))
        busy = np.fmax.accumulate(np.concatenate(([lr.busy_w], busy_cand)))
        lr.idle_w, lr.busy_w = float(idle[-1]), float(busy[-1])
        limit = self._limit()
        idle, busy = idle[1:], busy[1:]
        idle = np.where(np.isnan(idle), IDLE_FALLBACK * limit, idle)
        busy = np.where(np.isnan(busy), limit, np.fmin(busy, limit))
        self.cache["power_idle_w"] = idle
        self.cache["power_busy_w"] = busy
