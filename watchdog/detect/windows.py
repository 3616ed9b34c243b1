"""Time-based rolling windows over every GPU's samples at once, vectorised, block-size free.

A window statistic at a sample time ``t`` covers that GPU's samples with timestamps in
``(t - W, t]``. Each sample weighs ``d``: the time since the GPU's previous sample, capped
at ``max_gap`` (computed by the caller), so a long gap is never interpolated across.

The new samples of all GPUs in a block arrive concatenated GPU by GPU ("slots", see
:class:`Segments`); each statistic is computed for all of them with a fixed number of
numpy calls (prefix sums and ``searchsorted`` for each window start, a sparse table for
min/max), so the cost per block hardly depends on the number of GPUs. The tail of earlier
samples that later windows can still see is carried per slot, with the running prefix
sums, which are extended by one sequential cumulative sum per slot (``np.cumsum`` along
the rows of a slots × samples array): the numbers are bit-for-bit the same whether the
samples arrive in one block or one tick at a time.
"""

from __future__ import annotations

import numpy as np

NAN = np.nan
KINDS = ("mean", "min", "max", "last", "slope", "frac", "delta", "rate")
_NEEDS_X = ("min", "max", "last", "slope")


def seg_positions(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + lens[i])`` for every i."""
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, np.int64)
    before = np.cumsum(lens) - lens
    return np.repeat(starts - before, lens) + np.arange(total)


class Segments:
    """The new samples of a block, concatenated slot by slot (a slot is one GPU).

    ``ts`` (s, strictly increasing within a slot and later than the slot's earlier
    samples), ``d`` (weights, s), ``counts[slot]`` samples per slot (0 for a GPU without
    samples in this block). ``shared`` caches per-width layout common to every window of
    that width (their carried tails are identical).
    """

    def __init__(self, ts: np.ndarray, d: np.ndarray, counts: np.ndarray) -> None:
        self.ts = ts
        self.d = d
        self.counts = np.asarray(counts, dtype=np.int64)
        self.n_slots = len(self.counts)
        self.offsets = np.concatenate(([0], np.cumsum(self.counts)))
        self.gi = np.repeat(np.arange(self.n_slots), self.counts)
        self.shared: dict[float, tuple] = {}


class Window:
    """One statistic ``kind`` over ``width`` seconds, with carried per-slot state."""

    def __init__(self, kind: str, width: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown window statistic {kind!r}")
        if not width > 0:
            raise ValueError("window width must be positive")
        self.kind = kind
        self.width = float(width)
        self.tail_len = np.zeros(0, np.int64)
        self.tail_ts = np.empty(0)
        self.tail_x = np.empty(0)
        self.tail_pre: dict[str, np.ndarray] = {}
        self.base: dict[str, np.ndarray] = {}
        self.last_valid = np.empty(0)  # counters: latest valid reading per slot
        self.first = np.empty(0)  # mean: each slot's first-ever value (its weight is 0)
        self.first_ts = np.empty(0)  # ... and its time
        self.has_first = np.zeros(0, bool)
        self._slot_of: dict[str, int] = {}

    def update(self, gpu: str, ts: np.ndarray, d: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Convenience for one GPU: the statistic at each of its new samples."""
        slot = self._slot_of.setdefault(gpu, len(self._slot_of))
        counts = np.zeros(max(len(self._slot_of), len(self.tail_len)), np.int64)
        counts[slot] = len(ts)
        return self.update_block(Segments(ts, d, counts), x)

    def _grow(self, n: int) -> None:
        extra = n - len(self.tail_len)
        if extra <= 0:
            return
        self.tail_len = np.concatenate((self.tail_len, np.zeros(extra, np.int64)))
        self.last_valid = np.concatenate((self.last_valid, np.full(extra, NAN)))
        self.first = np.concatenate((self.first, np.full(extra, NAN)))
        self.first_ts = np.concatenate((self.first_ts, np.full(extra, NAN)))
        self.has_first = np.concatenate((self.has_first, np.zeros(extra, bool)))
        for name in self.base:
            self.base[name] = np.concatenate((self.base[name], np.zeros(extra)))

    def _layout(self, seg: Segments) -> tuple:
        """Per-width layout of tail + new samples (shared by windows of this width)."""
        got = seg.shared.get(self.width)
        # reuse only with the very same carried tail (the object shared since the last
        # block), or when neither window has seen a sample yet
        if got is not None and (got[0] is self.tail_ts or (
                not len(got[0]) and not len(self.tail_ts)
                and np.array_equal(got[1], self.tail_len))):
            return got[2:]
        t_len, n_new = self.tail_len, seg.counts
        total_len = t_len + n_new
        a = np.concatenate(([0], np.cumsum(total_len)))
        tail_pos = seg_positions(a[:-1], t_len)
        new_pos = seg_positions(a[:-1] + t_len, n_new)
        t_all = _interleave(self.tail_ts, t_len, seg.ts, seg, tail_pos, new_pos)
        s = np.empty(len(seg.ts), np.int64)
        keep = np.zeros(seg.n_slots, np.int64)
        for g in np.flatnonzero(n_new):
            lo, hi = int(a[g]), int(a[g + 1])
            part = t_all[lo:hi]
            s[seg.offsets[g]:seg.offsets[g + 1]] = lo + np.searchsorted(
                part, seg.ts[seg.offsets[g]:seg.offsets[g + 1]] - self.width, side="right")
            keep[g] = np.searchsorted(part, part[-1] - self.width, side="right")
        new_t = total_len - keep
        keep_pos = seg_positions(a[:-1] + keep, new_t)
        slot_ids = np.arange(seg.n_slots)
        gi = seg.gi
        width2d = int(seg.counts.max()) + 1
        # positions in the prefix-sum layout: per slot [base, tail..., new...]
        pre = {
            "tail": tail_pos + np.repeat(slot_ids, t_len) + 1,
            "new": new_pos + gi + 1,
            "base": a[:-1] + slot_ids,
            "before": a[:-1] + t_len + slot_ids,
            "start": s + gi,
            "flat": gi * width2d + (np.arange(len(gi)) - seg.offsets[gi]) + 1,
            "keep_base": a[:-1] + keep + slot_ids,
            "keep": keep_pos + np.repeat(slot_ids, new_t) + 1,
            "keep_loc": keep,
        }
        new_tail_ts = t_all[keep_pos]
        got = (self.tail_ts, t_len, a, tail_pos, new_pos, t_all, s, new_t, keep_pos, pre,
               width2d, new_tail_ts)
        seg.shared[self.width] = got
        return got[2:]

    def update_block(self, seg: Segments, x: np.ndarray) -> np.ndarray:
        """Statistic at each new sample of ``seg`` (same order), ``x`` its values."""
        if len(seg.ts) == 0:
            self._grow(seg.n_slots)
            return np.empty(0)
        self._grow(seg.n_slots)
        kind = self.kind
        (_a, tail_pos, new_pos, t_all, s, new_t, keep_pos, pre, width2d,
         new_tail_ts) = self._layout(seg)
        gi = seg.gi
        d = seg.d
        valid = ~np.isnan(x)
        if not (valid & (x != 0) if kind == "frac" else valid).any() and self._quiet():
            return self._quiet_block(seg, x, s, pre, width2d, new_t, keep_pos, new_tail_ts)
        if kind in _NEEDS_X:
            x_all = _interleave(self.tail_x, self.tail_len, x, seg, tail_pos, new_pos)
        terms: dict[str, np.ndarray] = {}
        # Every sample but a GPU's first-ever one has d > 0 (timestamps strictly increase),
        # so a window whose weights sum to 0 holds that first sample and nothing valid else.
        if kind == "mean":
            fresh = np.flatnonzero((seg.counts > 0) & ~self.has_first)
            if len(fresh):
                self.first[fresh] = x[seg.offsets[fresh]]
                self.first_ts[fresh] = seg.ts[seg.offsets[fresh]]
                self.has_first[fresh] = True
            terms = {"xd": np.where(valid, x * d, 0.0), "d": np.where(valid, d, 0.0)}
        elif kind == "frac":
            c = np.where(valid & (x != 0), 1.0, 0.0)
            terms = {"cd": c * d}
        elif kind in ("delta", "rate"):
            terms = {"inc": self._increments(seg, x, valid)}

        sums = self._sums(seg, terms, s, pre, width2d)
        if kind == "frac":
            sums["d"] = self._time_sums(seg, s, pre, width2d)

        def wsum(name: str) -> np.ndarray:
            return sums[name]

        with np.errstate(invalid="ignore", divide="ignore"):
            if kind == "mean":
                sd = wsum("d")
                out = wsum("xd") / sd
                zero = sd <= 0
                if zero.any():  # only the first-ever sample can be valid in there
                    g0 = gi[zero]
                    inside = self.first_ts[g0] > seg.ts[zero] - self.width
                    out[zero] = np.where(inside, self.first[g0], NAN)
            elif kind == "frac":
                sd = wsum("d")
                out = 100.0 * np.where(sd > 0, wsum("cd") / np.where(sd > 0, sd, 1.0), c)
            elif kind == "delta":
                out = wsum("inc")
            elif kind == "rate":
                out = wsum("inc") / self.width
            elif kind in ("min", "max"):
                out = range_reduce(x_all, s, new_pos, np.fmin if kind == "min" else np.fmax)
            else:  # last, slope
                idx = np.arange(len(x_all))
                ok = ~np.isnan(x_all)
                lv = np.maximum.accumulate(np.where(ok, idx, -1))[new_pos]
                has = lv >= s
                lv_c = np.where(has, lv, 0)
                if kind == "last":
                    out = np.where(has, x_all[lv_c], NAN)
                else:
                    fv_all = np.minimum.accumulate(np.where(ok, idx, len(x_all))[::-1])[::-1]
                    fv = fv_all[s]
                    in_w = fv <= new_pos
                    fv_c = np.where(in_w, fv, 0)
                    dt = t_all[lv_c] - t_all[fv_c]
                    good = has & in_w & (dt > 0)
                    out = np.where(good, (x_all[lv_c] - x_all[fv_c]) / np.where(good, dt, 1.0),
                                   NAN)

        # keep what a later window can still see: per slot, ts > last - width
        self.tail_ts = new_tail_ts  # one object shared by every window of this width
        if kind in _NEEDS_X:
            self.tail_x = x_all[keep_pos]
        self.tail_len = new_t
        return out

    def _quiet(self) -> bool:
        """Whether no carried sample can still count: no valid value in the tail (min, max,
        last, slope) or window sums that stay flat over it (mean, frac, delta, rate)."""
        if self.kind in _NEEDS_X:
            return not len(self.tail_x) or bool(np.isnan(self.tail_x).all())
        for name in ("xd", "d") if self.kind == "mean" else ("cd",) if self.kind == "frac" \
                else ("inc",):
            tail = self.tail_pre.get(name)
            if tail is not None and len(tail) and not np.array_equal(
                    tail, np.repeat(self.base[name][:len(self.tail_len)], self.tail_len)):
                return False
        return True

    def _quiet_block(self, seg: Segments, x: np.ndarray, s: np.ndarray,
                     pre: dict[str, np.ndarray], width2d: int, new_t: np.ndarray,
                     keep_pos: np.ndarray, new_tail_ts: np.ndarray) -> np.ndarray:
        """:meth:`update_block` for a block without a valid (frac: true) value and a quiet
        tail: a metric the log lacks (its rules evaluate to constants). The result and the
        carried state are exactly those of the full computation (flat prefix sums give
        window sums of exactly 0), at the cost of a few fills."""
        kind = self.kind
        n_slots = seg.n_slots
        if kind in _NEEDS_X:
            out = np.full(len(seg.ts), NAN)
            self.tail_x = np.full(int(new_t.sum()), NAN)
        else:
            names = {"mean": ("xd", "d"), "frac": ("cd",)}.get(kind, ("inc",))
            for name in names:  # flat prefix sums: the base carries on unchanged
                base = self.base.get(name, np.zeros(n_slots))
                self.base[name] = base
                self.tail_pre[name] = np.repeat(base[:n_slots], new_t)
            if kind == "mean":
                fresh = np.flatnonzero((seg.counts > 0) & ~self.has_first)
                if len(fresh):
                    self.first[fresh] = x[seg.offsets[fresh]]
                    self.first_ts[fresh] = seg.ts[seg.offsets[fresh]]
                    self.has_first[fresh] = True
                g0 = seg.gi
                out = np.where(self.first_ts[g0] > seg.ts - self.width, self.first[g0], NAN)
            elif kind == "frac":
                self._time_sums(seg, s, pre, width2d)
                out = np.zeros(len(seg.ts))
            else:  # delta, rate: no increment (the latest valid reading stays as it was)
                out = np.zeros(len(seg.ts))
        self.tail_ts = new_tail_ts
        self.tail_len = new_t
        return out

    def _time_sums(self, seg: Segments, s: np.ndarray, pre: dict[str, np.ndarray],
                   width2d: int) -> np.ndarray:
        """Window sums of the weights ``d`` (the frac denominator), carried as term "d".

        Every frac window of a width carrying the very same state (the same objects, as
        after the previous block) gets the same numbers: they are computed once per block.
        """
        key = ("d", self.width)
        tail, base = self.tail_pre.get("d"), self.base.get("d")
        got = seg.shared.get(key)
        if got is not None and got[0] is tail and got[1] is base:
            self.base["d"], self.tail_pre["d"] = got[2], got[3]
            return got[4]
        sums = self._sums(seg, {"d": seg.d}, s, pre, width2d)["d"]
        seg.shared[key] = (tail, base, self.base["d"], self.tail_pre["d"], sums)
        return sums

    def _sums(self, seg: Segments, terms: dict[str, np.ndarray], s: np.ndarray,
              pre: dict[str, np.ndarray], width2d: int) -> dict[str, np.ndarray]:
        """Window sums of each term at every new sample; carries the prefix-sum tails.

        Per slot the prefix sums are ``[base, tail prefixes..., new prefixes...]``; the new
        part is one sequential cumsum continuing from the slot's last prefix, so block and
        tick evaluation give the same bits. Small blocks (live ticks) do every slot at once
        with fancy indexing; large blocks (replay) go slot by slot on contiguous slices
        (faster there). Both paths perform the same additions.
        """
        n_slots = seg.n_slots
        if len(seg.ts) <= 32 * n_slots:
            return self._sums_joint(seg, terms, pre, width2d)
        t_len = self.tail_len
        t_off = np.concatenate(([0], np.cumsum(t_len)))
        keep = pre["keep_loc"]
        a = pre["base"] - np.arange(n_slots)  # slot starts in the tail+new layout
        sums = {name: np.empty(len(seg.ts)) for name in terms}
        parts: dict[str, list[np.ndarray]] = {name: [] for name in terms}
        bases = {name: self.base.get(name, np.zeros(n_slots)).copy() for name in terms}
        tails = {name: self.tail_pre.get(name, np.empty(0)) for name in terms}
        for g in range(n_slots):
            t, n = int(t_len[g]), int(seg.counts[g])
            lo, hi = int(t_off[g]), int(t_off[g + 1])
            if n == 0:
                for name in terms:
                    parts[name].append(tails[name][lo:hi])
                continue
            o0, o1 = int(seg.offsets[g]), int(seg.offsets[g + 1])
            s_loc = s[o0:o1] - a[g]
            k = int(keep[g])
            for name, term in terms.items():
                p = np.empty(1 + t + n)
                p[0] = bases[name][g]
                p[1:1 + t] = tails[name][lo:hi]
                p[1 + t:] = term[o0:o1]
                np.cumsum(p[t:], out=p[t:])
                sums[name][o0:o1] = p[1 + t:] - p[s_loc]
                bases[name][g] = p[k]
                parts[name].append(p[k + 1:])
        for name in terms:
            self.base[name] = bases[name]
            self.tail_pre[name] = np.concatenate(parts[name]) if parts[name] else np.empty(0)
        return sums

    def _sums_joint(self, seg: Segments, terms: dict[str, np.ndarray],
                    pre: dict[str, np.ndarray], width2d: int) -> dict[str, np.ndarray]:
        """:meth:`_sums` for every slot at once (rows of a slots × samples array)."""
        n_slots = seg.n_slots
        p_new_pos, ps, flat = pre["new"], pre["start"], pre["flat"]
        size = int(pre["base"][-1]) + 1 + int(self.tail_len[-1]) + int(seg.counts[-1])
        sums: dict[str, np.ndarray] = {}
        for name, term in terms.items():
            p = np.empty(size)
            p[pre["base"]] = self.base.get(name, np.zeros(n_slots))
            p[pre["tail"]] = self.tail_pre.get(name, np.empty(0))
            m = np.zeros((n_slots, width2d))
            m[:, 0] = p[pre["before"]]
            flat_m = m.reshape(-1)
            flat_m[flat] = term
            np.cumsum(m, axis=1, out=m)
            p[p_new_pos] = flat_m[flat]
            sums[name] = p[p_new_pos] - p[ps]
            self.base[name] = p[pre["keep_base"]]
            self.tail_pre[name] = p[pre["keep"]]
        return sums

    def _increments(self, seg: Segments, x: np.ndarray, valid: np.ndarray) -> np.ndarray:
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


def _interleave(tail: np.ndarray, tail_len: np.ndarray, new: np.ndarray, seg: Segments,
                tail_pos: np.ndarray, new_pos: np.ndarray) -> np.ndarray:
    """Per slot: its tail values, then its new values (scatter for ticks, slices else)."""
    if len(new) <= 32 * seg.n_slots:
        out = np.empty(len(tail) + len(new))
        out[tail_pos] = tail
        out[new_pos] = new
        return out
    t_off = np.concatenate(([0], np.cumsum(tail_len)))
    pieces = []
    for g in range(seg.n_slots):
        pieces.append(tail[t_off[g]:t_off[g + 1]])
        pieces.append(new[seg.offsets[g]:seg.offsets[g + 1]])
    return np.concatenate(pieces)


def range_reduce(x: np.ndarray, s: np.ndarray, e: np.ndarray, fn: np.ufunc) -> np.ndarray:
    """``fn``-reduction (``np.fmin``/``np.fmax``: NaN ignored) of ``x[s[i]:e[i]+1]``.

    A sparse table: level ``k`` holds the reduction of ``2**k`` consecutive values, so each
    range is the reduction of two overlapping power-of-two blocks. O(n log w) to build.
    """
    length = e - s + 1
    if not len(length):
        return np.empty(0)
    k = np.floor(np.log2(length)).astype(np.int64)
    lo, hi = int(k.min()), int(k.max())
    ks = np.array([lo]) if lo == hi else np.unique(k)
    levels = [x]
    for level in range(1, int(ks[-1]) + 1):
        prev = levels[-1]
        half = 1 << (level - 1)
        cur = np.full(len(x), NAN)
        if len(x) > half:
            cur[: len(x) - half] = fn(prev[: len(x) - half], prev[half:])
        levels.append(cur)
    if len(ks) == 1:  # the usual case: every window spans about the same sample count
        lv = levels[int(ks[0])]
        return fn(lv[s], lv[e - (1 << int(ks[0])) + 1])
    out = np.empty(len(s))
    for kk in ks:
        m = k == kk
        lv = levels[int(kk)]
        out[m] = fn(lv[s[m]], lv[e[m] - (1 << int(kk)) + 1])
    return out
