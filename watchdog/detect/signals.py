"""Derived signals: numbers that make rules portable across GPU models.

Each signal is a float array over one GPU's new samples (NaN = unknown), computed from the
catalogue metrics and the GPU's inventory. Percentages are 0–100 like the metrics. The
signals that read learned levels (idle and busy power, the highest SM clock, the serving
rhythm) advance them through :class:`~watchdog.detect.learned.PowerLevels`, causally, so
block and tick evaluation give the same numbers. The names are in :mod:`signal_names`;
the table of signals is in ``docs/rules.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from watchdog import catalogue, reasons
from watchdog.detect import fallbacks as fb
from watchdog.detect.lang import Node
from watchdog.detect.layout import Segments
from watchdog.detect.learned import (
    SERVER_MIN_MEMORY_MIB,
    PowerLevels,
    learn_windows,
    work_window,
)
from watchdog.detect.signal_names import FLAG_SIGNALS, SIGNALS
from watchdog.records import DeviceInfo
from watchdog.untyped import Array

NAN = np.nan
BAD_BITS = reasons.THERMAL | reasons.HARDWARE


class Sampler(Protocol):
    """What a block asks of its evaluator (:class:`watchdog.detect.evaluate.Evaluator`,
    which imports this module): an expression's value at each of the block's samples."""

    def sample(self, node: Node, b: Block) -> Array: ...


class Block(Segments):
    """The new samples of every GPU in a block, concatenated by slot, with lazily
    computed, cached signals.

    ``metrics`` maps catalogue names to arrays (absent metric = not in the dict);
    ``devices[slot]`` is each slot's inventory.
    """

    def __init__(self, ts: Array, d: Array, counts: Array,
                 devices: list[DeviceInfo], metrics: dict[str, Array], lost: Array,
                 xid: Array, xid_count: Array, levels: PowerLevels) -> None:
        super().__init__(ts, d, counts)
        self.devices = devices
        self.metrics = metrics
        self.lost = lost
        self.xid = xid
        self.xid_count = xid_count
        self.levels = levels  # learned per slot, advanced by this block's signals
        levels.grow(self.n_slots)
        self.cache: dict[str, Array] = {}
        self.asof: dict[int, tuple] = {}  # node-grid mapping per slot (see evaluate)
        self.grid_cache: dict[str, Array] = {}  # node-grid values (see evaluate)
        self.evaluator: Sampler | None = None  # the block's Evaluator, for learning windows
        self._bits_cache: tuple[Array, Array] | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def metric(self, name: str) -> Array:
        """A catalogue metric (NaN where missing or when the GPU is lost)."""
        arr = self.metrics.get(name)
        if arr is None:
            return np.full(len(self.ts), NAN)
        return arr

    def value(self, name: str) -> Array:
        """A metric or signal by name (cached for the block); ``NAME#src`` is the code of
        the source a chained signal used at each sample (:mod:`fallbacks`)."""
        got = self.cache.get(name)
        if got is None:
            if name.endswith("#src"):
                self.value(name[:-4])
                return self.cache[name]
            got = self._signal(name) if name in SIGNALS else self.metric(name)
            self.cache[name] = got
        return got

    def _chain(self, name: str, steps: list[tuple[int, Array | Callable[[], Array]]]
               ) -> Array:
        """The first valid value of ``steps`` (``(code, values)``, first source first;
        ``values`` an array or a function making one, called only while some sample has
        no value yet) at each sample; the codes go to ``NAME#src`` (NaN where none)."""
        out: Array | None = None
        src = np.full(len(self.ts), NAN)
        for code, vals in steps:
            if out is not None and not np.isnan(out).any():
                break
            vals = vals() if callable(vals) else vals
            fill = ~np.isnan(vals) if out is None else np.isnan(out) & ~np.isnan(vals)
            if out is None:
                out = np.where(fill, vals, NAN)
                src[fill] = float(code)
            elif fill.any():
                out = np.where(fill, vals, out)
                src[fill] = float(code)
        self.cache[name + "#src"] = src
        return out if out is not None else np.full(len(self.ts), NAN)

    def _model(self, field: str) -> Array:
        """A per-row array of the catalogue's figure ``field`` for each GPU's name."""
        key = "§model:" + field
        got = self.cache.get(key)
        if got is None:
            per_slot = []
            for d in self.devices:
                m = catalogue.gpu_model(d.name)
                v = getattr(m, field) if m is not None else None
                per_slot.append(NAN if v is None else float(v))
            got = self.cache[key] = np.array(per_slot, dtype=float)[self.gi]
        return got

    def _device(self, field: str) -> Array:
        """A per-row array of an inventory field (NaN where unknown or 0)."""
        key = "§dev:" + field
        got = self.cache.get(key)
        if got is None:
            per_slot = np.array([getattr(d, field) or NAN for d in self.devices], dtype=float)
            got = self.cache[key] = per_slot[self.gi]
        return got

    def _limit(self) -> Array:
        """The power limit per sample (W), through its chain (:mod:`fallbacks`)."""
        return self.value("power_limit_w")

    def _positive(self, x: Array) -> Array:
        return np.where(x > 0, x, NAN)

    def _used_free(self) -> Array:
        """``memory.used`` + ``memory.free`` + ``memory.reserved`` (0 where not logged)."""
        reserved = self.metric("memory.reserved")
        return (self.metric("memory.used") + self.metric("memory.free")
                + np.where(np.isnan(reserved), 0.0, reserved))

    def _signal(self, name: str) -> Array:
        n = len(self.ts)
        with np.errstate(invalid="ignore", divide="ignore"):
            if name == "power_pct":
                return 100.0 * self.metric("power.draw") / self._limit()
            if name == "power_limit_w":
                pos = self._positive
                return self._chain(name, [
                    (fb.LIMIT_COLUMN, pos(self.metric("enforced.power.limit"))),
                    (fb.LIMIT_DRIVER, lambda: pos(self._device("power_limit_enforced_w"))),
                    (fb.LIMIT_DEFAULT, lambda: pos(self._device("power_limit_default_w"))),
                    (fb.LIMIT_MAX, lambda: pos(self._device("power_limit_max_w"))),
                    (fb.LIMIT_CATALOGUE, lambda: self._model("tdp_w"))])
            if name == "mem_total_mib":
                return self._chain(name, [
                    (fb.TOTAL_COLUMN, self._positive(self.metric("memory.total"))),
                    (fb.TOTAL_DRIVER, lambda: self._positive(self._device("memory_total_mib"))),
                    (fb.TOTAL_USED_FREE, lambda: self._positive(self._used_free())),
                    (fb.TOTAL_CATALOGUE, lambda: self._model("memory_mib"))])
            if name == "temp_limit_c":
                return self._chain(name, [
                    (fb.TLIM_COLUMN, self.metric("temperature.gpu")
                     + self.metric("temperature.gpu.tlimit")),
                    (fb.TLIM_MAX_OPERATING, lambda: self._device("temp_max_operating_c")),
                    (fb.TLIM_SLOWDOWN, lambda: self._device("temp_slowdown_c")),
                    (fb.TLIM_CATALOGUE, lambda: self._model("max_operating_c"))])
            if name == "temp_work_max_c":
                return self.levels.work_temperature(self, self._warm(),
                                                    self.metric("temperature.gpu"))
            if name == "work_before_idle":
                return self._work_before_idle()
            if name == "watched_s":
                return self.levels.watched(self)
            if name in ("power_idle_w", "power_busy_w", "power_idle_learned_w"):
                self._learn_power()
                return self.cache[name]
            if name == "power_rel":
                idle, busy = self.value("power_idle_w"), self.value("power_busy_w")
                span = busy - idle
                return np.where(span > 0, 100.0 * (self.metric("power.draw") - idle) / span, NAN)
            if name == "mem_pct":
                total = self.value("mem_total_mib")
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

    def _bits(self) -> tuple[Array, Array]:
        """The clock-event reasons mask as integers (0 where unknown) and where it is known,
        decoded once per block for every flag."""
        got = self._bits_cache
        if got is None:
            mask = self.metric("clocks_event_reasons.active")
            ok = ~np.isnan(mask)
            got = self._bits_cache = (ok, np.where(ok, mask, 0).astype(np.int64))
        return got

    def _serving(self) -> Array:
        """1 = an inference server holds the GPU, 0 = its processes are known and none
        serves, NaN = cannot tell.

        Live, from the processes (``processes.serving``, :mod:`watchdog.serving`). Where
        that is unknown (a log), from the usage rhythm
        (:meth:`~watchdog.detect.learned.PowerLevels.serving_rhythm`: 1 for 6 h after an
        idle gap of 5 min or more with memory held ended in work). Causal and carried
        across blocks (block == tick)."""
        known = self.metric("processes.serving")
        rhythm = self.levels.serving_rhythm(self, self.metric("utilization.gpu"),
                                            self.metric("memory.used"))
        return np.where(np.isnan(known), rhythm, known)

    def _max_sm(self) -> Array:
        """The highest SM clock (MHz): the inventory's, else the highest seen so far."""
        dev = self._device("clocks_max_sm_mhz")
        seen = self.levels.max_sm(self, self.metric("clocks.sm"))
        out = np.where(np.isnan(dev), seen, dev)
        return np.where(out > 0, out, NAN)

    def _warm(self) -> Array:
        """The readings that teach the temperature while working (bool):
        :func:`~watchdog.detect.learned.working` at
        :data:`~watchdog.detect.learned.WARM_UTIL_PCT`, judged against the idle level as
        learned at each."""
        if "§warm" not in self.cache:
            self._learn_power()
        return self.cache["§warm"]

    def _learn_power(self) -> None:
        """Idle and busy power through their chains (:mod:`fallbacks`): first the learned
        levels (:meth:`~watchdog.detect.learned.PowerLevels.power`: idle from 30 s means,
        busy from working readings)."""
        lv = self.levels
        if self.evaluator is not None:
            util_w, power_w = learn_windows()
            util = self.evaluator.sample(util_w, self)
            power = self.evaluator.sample(power_w, self)
        else:  # a bare block (tests): the learned windows of its own
            util = lv.util_mean.update_block(self, self.metric("utilization.gpu"))
            power = lv.power_mean.update_block(self, self.metric("power.draw"))
        limit = self._limit()
        from_log = self.cache["power_limit_w#src"] < fb.LIMIT_CATALOGUE
        fixed: list[tuple[int, Array | Callable[[], Array]]] = [
            (fb.IDLE_LIMIT, np.where(from_log, fb.IDLE_OF_LIMIT * limit, NAN)),
            (fb.IDLE_CATALOGUE, lambda: self._model("idle_w")),
            (fb.IDLE_TDP, lambda: fb.IDLE_OF_LIMIT * self._model("tdp_w"))]
        ref = self._chain("§idle_fixed", fixed)
        reading = (self.metric("utilization.gpu"), self.metric("power.draw"),
                   self.metric("gpm.sm_activity"))
        idle, busy, warm = lv.power(self, util, power, ref, reading)
        self.cache["§warm"] = warm
        self.cache["power_idle_learned_w"] = idle  # NaN until an idle period is seen
        self.cache["power_idle_w"] = self._chain("power_idle_w", [
            (fb.IDLE_LEARNED, idle), *fixed, (fb.IDLE_BUSY, fb.IDLE_OF_BUSY * busy)])
        self.cache["power_busy_w"] = self._chain("power_busy_w", [
            # capped at the limit; NaN (not np.fmin's other side) where nothing is learned,
            # so the limit's stand-in is recorded as such and the page says so
            (fb.BUSY_LEARNED, np.where(np.isnan(busy), NAN, np.fmin(busy, limit))),
            (fb.BUSY_LIMIT, limit)])

    def _work_before_idle(self) -> Array:
        """The share (%) of the 30 min before the GPU last went idle in which it worked
        (:meth:`~watchdog.detect.learned.PowerLevels.work_before_idle`)."""
        util = self.metric("utilization.gpu")
        if self.evaluator is not None:
            worked, read = (self.evaluator.sample(w, self) for w in work_window())
        else:  # a bare block (tests): the windows of its own
            lv = self.levels
            held = self.metric("memory.used") >= SERVER_MIN_MEMORY_MIB
            worked = lv.work_mean.update_block(self, ((util >= 5.0) & held).astype(float))
            read = lv.read_mean.update_block(self, (~np.isnan(util) & held).astype(float))
        return self.levels.work_before_idle(self, util, worked, read)
