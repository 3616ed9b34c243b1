"""Where a block's samples sit in the arrays a window reads, and the index arithmetic on them.

The new samples of all GPUs in a block arrive concatenated GPU by GPU ("slots",
:class:`Segments`). A window also needs each slot's carried tail (its earlier samples, as
long as the longest window): :class:`Layout` lays tail + new samples out once per block,
finds where each window starts (one ``searchsorted`` per distinct width, or none when
every slot has the same times), and notices regular sampling (every window then starts a
fixed number of samples back: slices instead of gathers). Running sums over that layout
continue a carried :class:`Prefix` with one sequential cumulative sum per slot, so the
numbers are bit-for-bit the same whatever the block split. :func:`range_reduce` is the
sparse table behind ``min``/``max``. The statistics themselves are in :mod:`windows`.
"""

from __future__ import annotations

import numpy as np

from watchdog.untyped import Array

NAN = np.nan
JOINT_MAX = 32  # new samples per slot up to which a block is laid out jointly (live ticks)


def seg_positions(starts: Array, lens: Array) -> Array:
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
    samples in this block). ``shared`` caches per-block work of the window sets.
    """

    def __init__(self, ts: Array, d: Array, counts: Array) -> None:
        self.ts = ts
        self.d = d
        self.counts = np.asarray(counts, dtype=np.int64)
        self.n_slots = len(self.counts)
        self.offsets = np.concatenate(([0], np.cumsum(self.counts)))
        self.gi = np.repeat(np.arange(self.n_slots), self.counts)
        self.shared: dict[object, object] = {}


class Prefix:
    """Carried running sums of one term: per slot the total before its first tail sample
    (``base``) and the totals after each tail sample (``tail``)."""

    __slots__ = ("base", "tail")

    def __init__(self, base: Array, tail: Array) -> None:
        self.base = base
        self.tail = tail

    def grown(self, n_slots: int) -> Prefix:
        extra = n_slots - len(self.base)
        if extra <= 0:
            return self
        return Prefix(np.concatenate((self.base, np.zeros(extra))), self.tail)

    def flat(self, tail_len: Array) -> bool:
        """Whether no tail sample added anything (every tail total equals the base)."""
        return not len(self.tail) or bool(np.array_equal(
            self.tail, np.repeat(self.base[:len(tail_len)], tail_len)))


class Layout:
    """Tail + new samples of every slot for one block (shared by a WindowSet's series).

    Per slot the prefix-sum layout is ``[base, tail..., new...]``; values (``t_all``,
    ``x_all``) are laid out ``[tail..., new...]``. Start positions per width are computed
    once (:meth:`starts`).
    """

    def __init__(self, seg: Segments, tail_ts: Array, tail_len: Array,
                 keep_width: float) -> None:
        self.seg = seg
        n_slots = seg.n_slots
        t_len, n_new = tail_len, seg.counts
        self.t_len = t_len
        self.t_off = np.concatenate(([0], np.cumsum(t_len)))
        total_len = t_len + n_new
        a = np.concatenate(([0], np.cumsum(total_len)))
        self.a = a
        self.joint = len(seg.ts) <= JOINT_MAX * n_slots
        self.tail_pos = seg_positions(a[:-1], t_len)
        self.new_pos = seg_positions(a[:-1] + t_len, n_new)
        self.t_all = self.interleave(tail_ts, seg.ts)
        self._uniform = self._same_times()
        self._starts: dict[float, Array] = {}
        self._runs: dict[float, list[tuple[int, int, int]] | None] = {}
        keep = np.zeros(n_slots, np.int64)
        live = np.flatnonzero(n_new)
        if len(live):
            last = self.t_all[a[live + 1] - 1]
            keep[live] = self._search(last - keep_width, live, per_slot=True)
        new_t = total_len - keep
        slot_ids = np.arange(n_slots)
        gi = seg.gi
        self.keep_pos = seg_positions(a[:-1] + keep, new_t)
        self.new_t = new_t
        self.new_tail_ts = self.t_all[self.keep_pos]
        self.width2d = int(seg.counts.max()) + 1 if n_slots else 1
        self.p_size = int(a[-1]) + n_slots
        # positions in the prefix-sum layout: per slot [base, tail..., new...]
        self.p_tail = self.tail_pos + np.repeat(slot_ids, t_len) + 1
        self.p_new = self.new_pos + gi + 1
        self.p_base = a[:-1] + slot_ids
        self.p_before = a[:-1] + t_len + slot_ids
        self.p_keep_base = a[:-1] + keep + slot_ids
        self.p_keep = self.keep_pos + np.repeat(slot_ids, new_t) + 1
        self.flat = (gi * self.width2d + (np.arange(len(gi)) - seg.offsets[gi]) + 1
                     if self.joint else np.empty(0, np.int64))

    def _same_times(self) -> bool:
        """Whether every slot has the very same times (tail and new): one search serves
        them all (the usual replay case: every GPU read at every tick)."""
        seg = self.seg
        n = seg.n_slots
        if n < 2 or self.joint:
            return False
        sizes = self.a[1:] - self.a[:-1]
        if not (sizes == sizes[0]).all() or not (self.t_len == self.t_len[0]).all() \
                or sizes[0] == 0:
            return False
        rows = self.t_all.reshape(n, int(sizes[0]))
        return bool((rows == rows[0]).all())

    def _search(self, q: Array, slots: Array, per_slot: bool = False) -> Array:
        """Local positions (in each slot's ``[tail..., new...]``) of the first time
        ``> q``; ``q`` holds one query per slot (``per_slot``) or one per new sample."""
        a, seg = self.a, self.seg
        out = np.empty(len(q), np.int64)
        if per_slot:
            for j, g in enumerate(slots):
                out[j] = np.searchsorted(self.t_all[a[g]:a[g + 1]], q[j], side="right")
            return out
        if self._uniform:
            m = int(seg.counts[0])
            local = np.searchsorted(self.t_all[a[0]:a[1]], q[:m], side="right")
            return np.tile(local, seg.n_slots)
        for g in slots:
            o0, o1 = int(seg.offsets[g]), int(seg.offsets[g + 1])
            out[o0:o1] = np.searchsorted(self.t_all[a[g]:a[g + 1]], q[o0:o1], side="right")
        return out

    def starts(self, width: float) -> Array:
        """Per new sample: position in ``[tail..., new...]`` (all slots) of the first sample
        of its window."""
        got = self._starts.get(width)
        if got is None:
            seg = self.seg
            live = np.flatnonzero(seg.counts)
            if self.joint and int(seg.counts.max()) <= 1:
                # one new sample per slot (a live tick): count, per slot, the times not
                # inside the window; slots without a sample count nothing
                q = np.full(seg.n_slots, -np.inf)
                q[live] = seg.ts - width
                sizes = self.a[1:] - self.a[:-1]
                before = self.t_all <= np.repeat(q, sizes)
                got = self.a[live] + np.add.reduceat(before, self.a[live]).astype(np.int64)
            else:
                got = self._search(seg.ts - width, live) + self.a[seg.gi]
            self._starts[width] = got
        return got

    def runs(self, width: float) -> list[tuple[int, int, int]] | None:
        """Per slot with new samples ``(first, count, lag)`` when every window of the slot
        starts the same number of samples (``lag``) before its sample (regular sampling):
        window sums and reductions are then differences of slices, not gathers. None when
        some slot is irregular (or for small blocks)."""
        if width in self._runs:
            return self._runs[width]
        seg = self.seg
        s = self.starts(width)
        self._runs[width] = None
        if self.joint:
            return None
        lag = self.new_pos - s
        first = seg.offsets[:-1]
        live = np.flatnonzero(seg.counts)
        if self._uniform:  # every slot has the same times, so the same lags: check one
            m = int(seg.counts[0])
            if not bool((lag[:m] == lag[0]).all()):
                return None
        elif not bool((lag == lag[first[seg.gi]]).all()):
            return None
        out = [(int(first[g]), int(seg.counts[g]), int(lag[first[g]])) for g in live]
        self._runs[width] = out
        return out

    def interleave(self, tail: Array, new: Array) -> Array:
        """Per slot: its tail values, then its new values."""
        seg = self.seg
        if self.joint:
            out = np.empty(len(tail) + len(new))
            out[self.tail_pos] = tail
            out[self.new_pos] = new
            return out
        pieces = []
        for g in range(seg.n_slots):
            pieces.append(tail[self.t_off[g]:self.t_off[g + 1]])
            pieces.append(new[seg.offsets[g]:seg.offsets[g + 1]])
        return np.concatenate(pieces)

    def prefix(self, state: Prefix, term: Array) -> tuple[Array, Prefix]:
        """Running sums of ``term`` in the prefix layout, continuing ``state``; returns the
        array and the state to carry. One sequential cumsum per slot (block == tick)."""
        seg = self.seg
        n_slots = seg.n_slots
        p = np.empty(self.p_size)
        if self.joint:
            p[self.p_base] = state.base[:n_slots]
            p[self.p_tail] = state.tail
            m = np.zeros((n_slots, self.width2d))
            m[:, 0] = p[self.p_before]
            flat_m = m.reshape(-1)
            flat_m[self.flat] = term
            np.cumsum(m, axis=1, out=m)
            p[self.p_new] = flat_m[self.flat]
        else:
            for g in range(n_slots):
                t, n = int(self.t_len[g]), int(seg.counts[g])
                at = int(self.a[g]) + g
                p[at] = state.base[g]
                p[at + 1:at + 1 + t] = state.tail[self.t_off[g]:self.t_off[g + 1]]
                if n:
                    o0 = int(seg.offsets[g])
                    part = p[at + t:at + 1 + t + n]
                    part[1:] = term[o0:o0 + n]
                    np.cumsum(part, out=part)
        return p, Prefix(p[self.p_keep_base], p[self.p_keep])

    def carry_flat(self, state: Prefix) -> Prefix:
        """The carried state of a term that adds nothing in this block."""
        base = state.base[:self.seg.n_slots]
        return Prefix(state.base, np.repeat(base, self.new_t))


def range_reduce(x: Array, s: Array, e: Array, fn: np.ufunc,
                 levels: list[Array] | None = None) -> Array:
    """``fn``-reduction (``np.fmin``/``np.fmax``: NaN ignored) of ``x[s[i]:e[i]+1]``.

    A sparse table: level ``k`` holds the reduction of ``2**k`` consecutive values, so each
    range is the reduction of two overlapping power-of-two blocks. O(n log w) to build.
    ``levels`` (starting ``[x]``) is extended in place, so that windows of several widths
    over the same values share it.
    """
    length = e - s + 1
    if not len(length):
        return np.empty(0)
    if levels is None:
        levels = [x]
    k = np.floor(np.log2(length)).astype(np.int64)
    lo, hi = int(k.min()), int(k.max())
    ks = np.array([lo]) if lo == hi else np.flatnonzero(np.bincount(k - lo)) + lo
    extend_levels(levels, fn, int(ks[-1]))
    if len(ks) == 1:  # the usual case: every window spans about the same sample count
        lv = levels[int(ks[0])]
        return fn(lv[s], lv[e - (1 << int(ks[0])) + 1])
    out = np.empty(len(s))
    for kk in ks:
        m = k == kk
        lv = levels[int(kk)]
        out[m] = fn(lv[s[m]], lv[e[m] - (1 << int(kk)) + 1])
    return out


def extend_levels(levels: list[Array], fn: np.ufunc, k: int) -> None:
    """Build sparse-table levels up to ``k`` (level ``j`` reduces ``2**j`` values)."""
    x = levels[0]
    for level in range(len(levels), k + 1):
        prev = levels[-1]
        half = 1 << (level - 1)
        cur = np.empty(len(x))
        cut = max(len(x) - half, 0)
        if cut:
            fn(prev[:cut], prev[half:], out=cur[:cut])
        cur[cut:] = NAN
        levels.append(cur)
