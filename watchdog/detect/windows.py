"""Time-based rolling windows over every GPU's samples at once, vectorised, block-size free.

A window statistic at a sample time ``t`` covers that GPU's samples with timestamps in
``(t - W, t]``. Each sample weighs ``d``: the time since the GPU's previous sample, capped
at ``max_gap`` (computed by the caller), so a long gap is never interpolated across.

The new samples of all GPUs in a block arrive concatenated GPU by GPU ("slots", see
:class:`~watchdog.detect.layout.Segments`). Work is shared as far as the numbers allow:

* a :class:`WindowSet` knows every window before the first block; it carries one tail of
  earlier samples per slot (as long as its longest window) and lays tail + new samples
  out once per block (:class:`~watchdog.detect.layout.Layout`), with one ``searchsorted``
  per distinct width;
* a :class:`Series` holds what the windows over one argument (``utilization.gpu``,
  ``power_rel``...) need: running prefix sums of its terms (one sequential cumulative sum
  per slot, continued from the carried running total, so the numbers are bit-for-bit the
  same whatever the block split), its carried values (min, max, last, slope) and a sparse
  table per reduction. Every width of every statistic over that argument is then a few
  gathers, computed only when asked for (evidence only when an incident fires);
* a term that is all zero in a block over a flat carried tail (a metric the log lacks, a
  flag that never holds) costs no cumulative sum at all: its window sums are exactly 0.

:class:`Window` is the single-window convenience over a private WindowSet.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from watchdog.detect.layout import Layout, Prefix, Segments, extend_levels, range_reduce
from watchdog.untyped import Array

NAN = np.nan
STATISTICS = ("mean", "min", "max", "last", "slope", "frac", "delta", "rate")
_NEEDS_X = ("min", "max", "last", "slope")
_TERMS = {"mean": ("xd", "dv"), "frac": ("cd",), "delta": ("inc",), "rate": ("inc",)}


class Series:
    """Carried state and per-block results of every window over one argument."""

    def __init__(self, kinds: set[str], n_tail: int = 0) -> None:
        self.kinds = set(kinds)
        self.prefix: dict[str, Prefix] = {}
        self.tail_x = np.full(n_tail, NAN)
        self.last_valid = np.empty(0)  # counters: latest valid reading per slot
        self.first = np.empty(0)  # mean: each slot's first-ever value (its weight is 0)
        self.first_ts = np.empty(0)  # ... and its time
        self.has_first = np.zeros(0, bool)
        self.dv_is_d = True  # mean: every value so far valid, so its weights are plain d
        self.seen: object = None  # the layout this series was last advanced with
        self._x: Array = np.empty(0)
        self._sums: dict[str, Array | None] = {}
        self._p: dict[str, Array | None] = {}
        self._cache: dict[tuple[str, float], Array] = {}
        self._levels: dict[str, list[Array]] = {}
        self._x_all: Array | None = None

    def _grow(self, n: int) -> None:
        extra = n - len(self.first)
        if extra <= 0:
            return
        self.last_valid = np.concatenate((self.last_valid, np.full(extra, NAN)))
        self.first = np.concatenate((self.first, np.full(extra, NAN)))
        self.first_ts = np.concatenate((self.first_ts, np.full(extra, NAN)))
        self.has_first = np.concatenate((self.has_first, np.zeros(extra, bool)))
        for name, st in self.prefix.items():
            self.prefix[name] = st.grown(n)

    def advance(self, ws: WindowSet, lay: Layout, x: Array) -> None:
        """Take a block's values ``x`` (one per new sample of ``lay``)."""
        seg = lay.seg
        self._grow(seg.n_slots)
        self.seen = lay
        self._x = x
        self._cache = {}
        self._levels = {}
        self._x_all = None
        self._p = {}
        self._sums = {}
        valid = ~np.isnan(x)
        self._valid = valid
        terms: dict[str, Callable[[], Array]] = {}
        if "mean" in self.kinds:
            fresh = np.flatnonzero((seg.counts > 0) & ~self.has_first)
            if len(fresh):
                self.first[fresh] = x[seg.offsets[fresh]]
                self.first_ts[fresh] = seg.ts[seg.offsets[fresh]]
                self.has_first[fresh] = True
            all_valid = bool(valid.all())
            terms["xd"] = lambda: x * seg.d if all_valid else np.where(valid, x * seg.d, 0.0)
            if self.dv_is_d and not all_valid:  # weights part from plain d from now on
                self.dv_is_d = False
                self.prefix["dv"] = ws.d_before
            if not self.dv_is_d:
                terms["dv"] = lambda: np.where(valid, seg.d, 0.0)
        if "frac" in self.kinds:
            self._c = np.where(valid & (x != 0), 1.0, 0.0)
            terms["cd"] = lambda: self._c * seg.d
        if "delta" in self.kinds or "rate" in self.kinds:  # no valid reading: no rise
            terms["inc"] = lambda: (self._increments(seg, x, valid) if valid.any()
                                    else np.zeros(len(x)))
        for name, make in terms.items():
            st = self.prefix.get(name) or Prefix(np.zeros(seg.n_slots), np.empty(0))
            term = make()
            if not term.any() and st.flat(lay.t_len):  # adds nothing: sums are exactly 0
                self._p[name] = None
                self.prefix[name] = lay.carry_flat(st)
            else:
                self._p[name], self.prefix[name] = lay.prefix(st, term)
        if self.kinds & set(_NEEDS_X):
            self._quiet_x = not valid.any() and bool(np.isnan(self.tail_x).all())
            if self._quiet_x:
                self.tail_x = np.full(int(lay.new_t.sum()), NAN)
            else:
                self._x_all = lay.interleave(self.tail_x, x)
                self.tail_x = self._x_all[lay.keep_pos]

    def _wsum(self, ws: WindowSet, lay: Layout, name: str, width: float) -> Array:
        """Window sums of term ``name`` at every new sample."""
        shared = name == "d" or (name == "dv" and self.dv_is_d)
        p = ws.plain_d(lay) if shared else self._p[name]
        if p is None:
            return np.zeros(len(lay.seg.ts))
        runs = lay.runs(width)
        if runs is not None:  # the same subtractions, on slices
            out = np.empty(len(lay.seg.ts))
            for o0, n, lag in runs:
                at = int(lay.p_new[o0])
                np.subtract(p[at:at + n], p[at - lag - 1:at - lag - 1 + n], out=out[o0:o0 + n])
            return out
        at_new = self._sums.get(name)
        if at_new is None:
            at_new = self._sums[name] = p[lay.p_new]
        return at_new - p[lay.starts(width) + lay.seg.gi]

    def value(self, ws: WindowSet, lay: Layout, kind: str, width: float) -> Array:
        """Statistic ``kind`` over ``width`` s at each new sample of the current block."""
        key = (kind, width)
        got = self._cache.get(key)
        if got is not None:
            return got
        seg = lay.seg
        n = len(seg.ts)
        with np.errstate(invalid="ignore", divide="ignore"):
            if kind == "mean" and self._p.get("xd", 0) is None and not self.dv_is_d \
                    and self._p.get("dv", 0) is None:
                # flat running sums: every window sums to 0, only the first-ever sample
                # can be in there (what the general formula below gives, without it)
                g0 = seg.gi
                out = (np.full(n, NAN) if np.isnan(self.first[:seg.n_slots]).all() else
                       np.where(self.first_ts[g0] > seg.ts - width, self.first[g0], NAN))
            elif kind == "mean":
                sd = self._wsum(ws, lay, "dv", width)
                out = self._wsum(ws, lay, "xd", width) / sd
                zero = sd <= 0
                if zero.any():  # only the first-ever sample can be valid in there
                    g0 = seg.gi[zero]
                    inside = self.first_ts[g0] > seg.ts[zero] - width
                    out[zero] = np.where(inside, self.first[g0], NAN)
            elif kind == "frac" and self._p.get("cd", 0) is None and not self._c.any():
                # nothing held in this block nor in the carried tail: 0 % (what the
                # formula below gives: 0 / sd where sd > 0, 100 * 0 elsewhere)
                out = np.zeros(n)
            elif kind == "frac":
                sd = self._wsum(ws, lay, "d", width)
                cd = self._wsum(ws, lay, "cd", width)
                out = 100.0 * np.where(sd > 0, cd / np.where(sd > 0, sd, 1.0), self._c)
            elif kind == "delta":
                out = self._wsum(ws, lay, "inc", width)
            elif kind == "rate":
                out = self._wsum(ws, lay, "inc", width) / width
            elif self._quiet_x:
                out = np.full(n, NAN)
            elif kind in ("min", "max"):
                out = self._range(lay, width, np.fmin if kind == "min" else np.fmax)
            else:
                out = self._last_slope(lay, width, kind)
        self._cache[key] = out
        return out

    def _range(self, lay: Layout, width: float, fn: np.ufunc) -> Array:
        x_all = self._x_all
        assert x_all is not None
        s, e = lay.starts(width), lay.new_pos
        if not len(s):
            return np.empty(0)
        if int(lay.seg.counts.max()) <= 1:  # one sample per slot: disjoint windows
            idx = np.empty(2 * len(s), np.int64)
            idx[0::2], idx[1::2] = s, e + 1
            padded = np.append(x_all, NAN)
            return fn.reduceat(padded, idx)[0::2]
        const = self._slot_constants(lay)
        if const is not None:  # every window of a slot reduces copies of one value
            return const[lay.seg.gi]
        levels = self._levels.setdefault(fn.__name__, [x_all])
        runs = lay.runs(width)
        if runs is None:
            return range_reduce(x_all, s, e, fn, levels)
        out = np.empty(len(s))  # per slot: two shifted slices of one sparse-table level
        for o0, n, lag in runs:
            k = int(np.floor(np.log2(lag + 1)))
            extend_levels(levels, fn, k)
            lv, e0 = levels[k], int(e[o0])
            fn(lv[e0 - lag:e0 - lag + n], lv[e0 - (1 << k) + 1:e0 - (1 << k) + 1 + n],
               out=out[o0:o0 + n])
        return out

    def _slot_constants(self, lay: Layout) -> Array | None:
        """Per slot its one value when every tail and new value of the slot is that same
        number (no NaN): a flag that does not change in the block, a flat memory level.
        Its min and max over any window are then that value, with no sparse table. None
        otherwise (checked once per block, for every width and both reductions)."""
        if "__const__" in self._levels:
            got = self._levels["__const__"]
            return got[0] if got else None
        x_all = self._x_all
        assert x_all is not None
        sizes = lay.a[1:] - lay.a[:-1]
        firsts = x_all[np.minimum(lay.a[:-1], max(len(x_all) - 1, 0))] if len(x_all) \
            else np.empty(0)
        same = bool(np.array_equal(x_all, np.repeat(firsts, sizes)))  # NaN: not the same
        self._levels["__const__"] = [firsts] if same else []
        return firsts if same else None

    def _last_slope(self, lay: Layout, width: float, kind: str) -> Array:
        x_all = self._x_all
        assert x_all is not None
        s, new_pos, t_all = lay.starts(width), lay.new_pos, lay.t_all
        lv = self._cache.get(("__lv__", 0.0))
        if lv is None:
            idx = np.arange(len(x_all))
            ok = ~np.isnan(x_all)
            lv = self._cache[("__lv__", 0.0)] = np.maximum.accumulate(
                np.where(ok, idx, -1))[new_pos]
        has = lv >= s
        lv_c = np.where(has, lv, 0)
        if kind == "last":
            return np.where(has, x_all[lv_c], NAN)
        fv_all = self._cache.get(("__fv__", 0.0))
        if fv_all is None:
            idx = np.arange(len(x_all))
            ok = ~np.isnan(x_all)
            fv_all = self._cache[("__fv__", 0.0)] = np.minimum.accumulate(
                np.where(ok, idx, len(x_all))[::-1])[::-1]
        fv = fv_all[s]
        in_w = fv <= new_pos
        fv_c = np.where(in_w, fv, 0)
        dt = t_all[lv_c] - t_all[fv_c]
        good = has & in_w & (dt > 0)
        return np.where(good, (x_all[lv_c] - x_all[fv_c]) / np.where(good, dt, 1.0), NAN)

    def _increments(self, seg: Segments, x: Array, valid: Array) -> Array:
        """Counter rises at each new sample (reset-tolerant); updates ``last_valid``."""
        n_slots = seg.n_slots
        # per slot: [last valid reading, new values...]
        e_start = seg.offsets[:-1] + np.arange(n_slots)
        e_new = np.arange(len(x)) + seg.gi + 1
        arr = np.empty(len(x) + n_slots)
        arr[e_start] = self.last_valid[:n_slots]
        arr[e_new] = x
        ok = ~np.isnan(arr)
        ok[e_start] = True  # slot starts are barriers (their value may be NaN: unknown)
        ff = np.maximum.accumulate(np.where(ok, np.arange(len(arr)), 0))
        prev = arr[ff[e_new - 1]]
        has_prev = ~np.isnan(prev)
        inc = np.where(valid & has_prev, np.where(x >= prev, x - prev, x), 0.0)
        ends = seg.offsets[1:] + np.arange(n_slots)  # last element of each slot
        self.last_valid[:n_slots] = arr[ff[ends]]
        return inc


class WindowSet:
    """Every window of a detector, declared before the first block (:meth:`add`).

    Per block: :meth:`value` advances the argument's series on first use and returns a
    window's values; :meth:`finish` advances the series nobody asked for (their windows
    feed evidence only) and carries the tails to the next block.
    """

    def __init__(self) -> None:
        self.series: dict[str, Series] = {}
        self.args: dict[str, object] = {}
        self.widths: set[float] = set()
        self.tail_ts = np.empty(0)
        self.tail_len = np.zeros(0, np.int64)
        self.d_state = Prefix(np.zeros(0), np.empty(0))
        self.d_before = self.d_state
        self._layout: Layout | None = None
        self._seg: Segments | None = None
        self._plain_d: Array | None = None
        self.started = False

    def add(self, key: str, arg: object, kind: str, width: float) -> None:
        """Declare ``kind(arg, width)``; ``key`` names the argument (its canonical text)."""
        if kind not in STATISTICS:
            raise ValueError(f"unknown window statistic {kind!r}")
        if not width > 0:
            raise ValueError("window width must be positive")
        if self.started:
            raise RuntimeError("windows must be declared before the first block")
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = Series({kind})
            self.args[key] = arg
        s.kinds.add(kind)
        self.widths.add(float(width))

    def has(self, key: str, kind: str, width: float) -> bool:
        s = self.series.get(key)
        return s is not None and kind in s.kinds and float(width) in self.widths

    def layout(self, seg: Segments) -> Layout:
        """The current block's layout (made on first use in the block)."""
        if self._seg is not seg or self._layout is None:
            self.started = True
            self._plain_d = None
            n = seg.n_slots
            if len(self.tail_len) < n:
                self.tail_len = np.concatenate(
                    (self.tail_len, np.zeros(n - len(self.tail_len), np.int64)))
            self.d_state = self.d_state.grown(n)
            self.d_before = self.d_state
            self._layout = Layout(seg, self.tail_ts, self.tail_len,
                                  max(self.widths, default=0.0))
            self._seg = seg
            self._plain_d = None
        return self._layout

    def plain_d(self, lay: Layout) -> Array:
        """Running sums of the plain weights ``d`` (frac denominators; means over values
        that were never missing), once per block."""
        if self._plain_d is None:
            self._plain_d, self._d_after = lay.prefix(self.d_before, lay.seg.d)
        return self._plain_d

    def value(self, seg: Segments, key: str, kind: str, width: float,
              arg: Callable[[], Array]) -> Array:
        """``kind(key, width)`` at each new sample of ``seg``; ``arg()`` gives the argument's
        values (called once per block)."""
        if len(seg.ts) == 0:
            return np.empty(0)
        lay = self.layout(seg)
        s = self.series[key]
        if s.seen is not lay:
            s.advance(self, lay, arg())
        return s.value(self, lay, kind, float(width))

    def finish(self, seg: Segments, arg: Callable[[object], Array]) -> None:
        """End of a block: advance the series not used in it; carry the tails."""
        self.advance_unused(seg, arg)
        self.carry(seg)

    def advance_unused(self, seg: Segments, arg: Callable[[object], Array]) -> None:
        """Advance the series the block did not use (``arg`` gives an argument's values;
        it may read windows of this set or of another set not yet carried)."""
        if len(seg.ts) == 0 or not self.series:
            return
        lay = self.layout(seg)
        for key, s in self.series.items():
            if s.seen is not lay:
                s.advance(self, lay, arg(self.args[key]))

    def carry(self, seg: Segments) -> None:
        """End of a block, after :meth:`advance_unused` of every set: keep the tails."""
        if len(seg.ts) == 0 or not self.series:
            return
        lay = self.layout(seg)
        self.plain_d(lay)
        self.d_state = self._d_after
        self.tail_ts = lay.new_tail_ts
        self.tail_len = lay.new_t
        self._layout = None
        self._seg = None
        for s in self.series.values():  # drop the block's arrays
            s._cache, s._levels, s._x_all, s._p, s._sums = {}, {}, None, {}, {}
            s.seen = None


class Window:
    """One statistic ``kind`` over ``width`` seconds, with carried per-slot state (a
    WindowSet of one window)."""

    def __init__(self, kind: str, width: float) -> None:
        self.kind = kind
        self.width = float(width)
        self._set = WindowSet()
        self._set.add("x", None, kind, width)
        self._slot_of: dict[str, int] = {}

    def update(self, gpu: str, ts: Array, d: Array, x: Array) -> Array:
        """Convenience for one GPU: the statistic at each of its new samples."""
        slot = self._slot_of.setdefault(gpu, len(self._slot_of))
        counts = np.zeros(max(len(self._slot_of), len(self._set.tail_len)), np.int64)
        counts[slot] = len(ts)
        return self.update_block(Segments(ts, d, counts), x)

    def update_block(self, seg: Segments, x: Array) -> Array:
        """Statistic at each new sample of ``seg`` (same order), ``x`` its values."""
        out = self._set.value(seg, "x", self.kind, self.width, lambda: x)
        self._set.finish(seg, lambda _arg: x)
        return out
