"""Time-based rolling windows over one GPU's samples, vectorised, block-size independent.

A window statistic at a sample time ``t`` covers the GPU's samples with timestamps in
``(t - W, t]``. Each sample weighs ``d``: the time since the GPU's previous sample, capped
at ``max_gap`` (computed by the caller), so a long gap is never interpolated across.

Every statistic is computed for a whole block of new samples at once (numpy: prefix sums
and ``searchsorted`` for each window start, a sparse table for min/max). The tail of the
previous blocks that later windows can still see is carried over, together with the
running prefix sums, which are extended with one sequential ``np.cumsum``: the numbers
are bit-for-bit the same whether the samples arrive in one block or one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NAN = np.nan
KINDS = ("mean", "min", "max", "last", "slope", "frac", "delta", "rate")
# prefix sums each statistic carries
_PREFIXES = {"mean": ("xd", "d", "x", "n"), "frac": ("cd", "d", "c"), "delta": ("inc",),
             "rate": ("inc",)}


@dataclass
class _Tail:
    """Samples a future window may still see, plus prefix sums aligned with them."""

    ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    x: np.ndarray = field(default_factory=lambda: np.empty(0))
    pre: dict[str, np.ndarray] = field(default_factory=dict)  # inclusive prefix sums
    base: dict[str, float] = field(default_factory=dict)  # prefix before the first tail row
    last_valid: float = NAN  # counters: the latest valid reading (for increments)
    first: float | None = None  # mean: the GPU's first-ever value (its weight is 0)


class Window:
    """One statistic ``kind`` over ``width`` seconds, with per-GPU carried state."""

    def __init__(self, kind: str, width: float) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown window statistic {kind!r}")
        if not width > 0:
            raise ValueError("window width must be positive")
        self.kind = kind
        self.width = float(width)
        self._tails: dict[str, _Tail] = {}

    def update(self, gpu: str, ts: np.ndarray, d: np.ndarray, x: np.ndarray,
               starts: dict[float, np.ndarray] | None = None) -> np.ndarray:
        """Statistic at each new sample of ``gpu``.

        ``ts`` (s, strictly increasing, later than every earlier sample of this GPU),
        ``d`` (weights, s) and ``x`` (values, NaN = missing) are the new samples only.
        ``starts`` caches window start indices per width for one GPU and block: windows of
        the same width carry the same tail, so their starts are the same.
        """
        n_new = len(ts)
        if n_new == 0:
            return np.empty(0)
        tail = self._tails.setdefault(gpu, _Tail())
        kind = self.kind
        n_tail = len(tail.ts)
        shared = None if starts is None else starts.get(self.width)
        if shared is None or len(shared[0]) != n_new or len(shared[1]) != n_tail + n_new:
            t_all = np.concatenate((tail.ts, ts))
            s = np.searchsorted(t_all, ts - self.width, side="right")
            keep = int(np.searchsorted(t_all, t_all[-1] - self.width, side="right"))
            shared = (s, t_all, keep)
            if starts is not None:
                starts[self.width] = shared
        s, t_all, keep = shared
        needs_x = kind in ("min", "max", "last", "slope")
        x_all = np.concatenate((tail.x, x)) if needs_x else x
        e = np.arange(n_tail, n_tail + n_new) if needs_x else None

        valid = ~np.isnan(x)
        terms: dict[str, np.ndarray] = {}
        # Every sample but a GPU's first-ever one has d > 0 (timestamps strictly increase),
        # so a window whose weights sum to 0 holds that first sample and nothing valid else.
        if kind == "mean":
            if tail.first is None:
                tail.first = float(x[0])
            terms = {"xd": np.where(valid, x * d, 0.0), "d": np.where(valid, d, 0.0),
                     "n": valid.astype(np.float64)}
        elif kind == "frac":
            c = np.where(valid & (x != 0), 1.0, 0.0)
            terms = {"cd": c * d, "d": d}
        elif kind in ("delta", "rate"):
            terms = {"inc": self._increments(tail, x, valid)}
        full: dict[str, np.ndarray] = {}
        for name, term in terms.items():
            # [base, tail prefixes..., new prefixes...]; the new part is one sequential
            # cumsum continuing from the last carried prefix (bit-identical to tick mode)
            p = np.empty(1 + n_tail + n_new)
            p[0] = tail.base.get(name, 0.0)
            if n_tail:
                p[1:1 + n_tail] = tail.pre[name]
            p[1 + n_tail:] = term
            np.cumsum(p[n_tail:], out=p[n_tail:])
            full[name] = p

        def wsum(name: str) -> np.ndarray:
            p = full[name]
            return p[n_tail + 1:] - p[s]

        with np.errstate(invalid="ignore", divide="ignore"):
            if kind == "mean":
                sd = wsum("d")
                out = wsum("xd") / sd
                zero = sd <= 0
                if zero.any():
                    out[zero] = np.where(wsum("n")[zero] > 0, tail.first, NAN)
            elif kind == "frac":
                sd = wsum("d")
                out = 100.0 * np.where(sd > 0, wsum("cd") / np.where(sd > 0, sd, 1.0), c)
            elif kind == "delta":
                out = wsum("inc")
            elif kind == "rate":
                out = wsum("inc") / self.width
            elif kind in ("min", "max"):
                out = range_reduce(x_all, s, e, np.fmin if kind == "min" else np.fmax)
            else:  # last, slope
                idx = np.arange(len(x_all))
                ok = ~np.isnan(x_all)
                lv = np.maximum.accumulate(np.where(ok, idx, -1))[e]
                has = lv >= s
                lv_c = np.where(has, lv, 0)
                if kind == "last":
                    out = np.where(has, x_all[lv_c], NAN)
                else:
                    fv_all = np.minimum.accumulate(np.where(ok, idx, len(x_all))[::-1])[::-1]
                    fv = fv_all[s]
                    fv_c = np.where(fv <= e, fv, 0)
                    dt = t_all[lv_c] - t_all[fv_c]
                    good = has & (fv <= e) & (dt > 0)
                    out = np.where(good, (x_all[lv_c] - x_all[fv_c]) / np.where(good, dt, 1.0),
                                   NAN)

        # keep what a later window can still see: ts > last - width
        tail.ts = t_all[keep:]
        tail.x = x_all[keep:] if needs_x else np.empty(0)
        for name, p in full.items():
            tail.base[name] = float(p[keep])
            tail.pre[name] = p[keep + 1:]
        return out

    @staticmethod
    def _increments(tail: _Tail, x: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Counter rises at each new sample (reset-tolerant); updates ``tail.last_valid``."""
        arr = np.concatenate(([tail.last_valid], x))
        ok = ~np.isnan(arr)
        ff = np.maximum.accumulate(np.where(ok, np.arange(len(arr)), 0))
        prev = arr[ff[:-1]]
        has_prev = ~np.isnan(prev)
        inc = np.where(valid & has_prev, np.where(x >= prev, x - prev, x), 0.0)
        tail.last_valid = float(arr[ff[-1]])
        return inc

    def forget(self, gpu: str) -> None:
        """Drop a GPU's carried samples (it vanished)."""
        self._tails.pop(gpu, None)


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
