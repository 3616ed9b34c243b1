"""Window statistics against a slow, obvious reference, and block-size independence."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.detect.windows import STATISTICS, Segments, Window, range_reduce

MAX_GAP = 30.0


def weights(ts: np.ndarray) -> np.ndarray:
    prev = np.concatenate(([np.nan], ts[:-1]))
    return np.where(np.isnan(prev), 0.0, np.minimum(ts - prev, MAX_GAP))


def reference(kind: str, width: float, ts: np.ndarray, x: np.ndarray) -> list[float]:
    """One Python loop per sample, straight from the definitions in docs/rules.md."""
    d = weights(ts)
    out = []
    last_valid = math.nan
    incs = []
    for v in x:  # counter increments, reset-tolerant
        if math.isnan(v):
            incs.append(0.0)
            continue
        incs.append(0.0 if math.isnan(last_valid) else (v - last_valid if v >= last_valid else v))
        last_valid = v
    for i, t in enumerate(ts):
        idx = [j for j in range(i + 1) if ts[j] > t - width]
        valid = [j for j in idx if not math.isnan(x[j])]
        if kind == "mean":
            sd = sum(d[j] for j in valid)
            if sd > 0:
                out.append(sum(x[j] * d[j] for j in valid) / sd)
            else:
                out.append(sum(x[j] for j in valid) / len(valid) if valid else math.nan)
        elif kind in ("min", "max"):
            vals = [x[j] for j in valid]
            out.append((min if kind == "min" else max)(vals) if vals else math.nan)
        elif kind == "last":
            out.append(x[valid[-1]] if valid else math.nan)
        elif kind == "slope":
            if len(valid) >= 2 and ts[valid[-1]] > ts[valid[0]]:
                a, b = valid[0], valid[-1]
                out.append((x[b] - x[a]) / (ts[b] - ts[a]))
            else:
                out.append(math.nan)
        elif kind == "frac":
            c = [1.0 if (not math.isnan(x[j]) and x[j] != 0) else 0.0 for j in idx]
            sd = sum(d[j] for j in idx)
            if sd > 0:
                out.append(100 * sum(c[k] * d[j] for k, j in enumerate(idx)) / sd)
            else:
                out.append(100 * sum(c) / len(c))
        elif kind in ("delta", "rate"):
            s = sum(incs[j] for j in idx)
            out.append(s if kind == "delta" else s / width)
    return out


@st.composite
def series(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 60))
    dts = draw(st.lists(st.one_of(st.floats(0.1, 10.0), st.floats(30.0, 90.0)),
                        min_size=n, max_size=n))
    ts = 1_700_000_000.0 + np.cumsum(np.round(np.array(dts), 3))
    vals = draw(st.lists(st.one_of(st.none(), st.floats(0, 1000), st.integers(0, 5)),
                         min_size=n, max_size=n))
    x = np.array([math.nan if v is None else float(v) for v in vals])
    return ts, x


@settings(max_examples=60, deadline=None)
@given(series(), st.sampled_from(STATISTICS), st.sampled_from([0.5, 5.0, 30.0, 120.0]))
def test_each_statistic_matches_the_slow_reference(data, kind, width) -> None:
    ts, x = data
    got = Window(kind, width).update("g", ts, weights(ts), x)
    want = np.array(reference(kind, width, ts, x))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(series(), st.sampled_from(STATISTICS), st.sampled_from([0.5, 5.0, 30.0, 120.0]),
       st.lists(st.integers(1, 59), max_size=6))
def test_any_block_split_gives_bitwise_identical_results(data, kind, width, cuts) -> None:
    ts, x = data
    d = weights(ts)
    whole = Window(kind, width).update("g", ts, d, x)
    w = Window(kind, width)
    bounds = [0, *sorted({c for c in cuts if c < len(ts)}), len(ts)]
    parts = [w.update("g", ts[a:b], d[a:b], x[a:b]) for a, b in itertools.pairwise(bounds)]
    split = np.concatenate(parts)
    assert np.array_equal(whole, split, equal_nan=True)


def test_gpus_keep_separate_state() -> None:
    w = Window("mean", 10.0)
    ts = np.array([1.0, 2.0, 3.0])
    d = np.array([0.0, 1.0, 1.0])
    a = w.update("a", ts, d, np.array([10.0, 10.0, 10.0]))
    b = w.update("b", ts, d, np.array([50.0, 50.0, 50.0]))
    assert list(a) == [10.0, 10.0, 10.0] and list(b) == [50.0, 50.0, 50.0]


def test_a_long_gap_is_not_interpolated() -> None:
    # 100 for 10 s, a 300 s gap, then one sample of 0: the 0 weighs max_gap (30 s), not 300
    ts = np.array([0.0, 10.0, 310.0])
    x = np.array([100.0, 100.0, 0.0])
    got = Window("mean", 1000.0).update("g", ts, weights(ts), x)
    assert got[-1] == (100.0 * 10.0 + 0.0 * 30.0) / 40.0


def test_counter_reset_counts_the_new_value() -> None:
    ts = np.arange(5.0)
    x = np.array([100.0, 103.0, 2.0, 5.0, np.nan])  # reset between 103 and 2
    got = Window("delta", 100.0).update("g", ts, weights(ts), x)
    assert list(got) == [0.0, 3.0, 5.0, 8.0, 8.0]


def test_range_reduce_ignores_nan() -> None:
    x = np.array([3.0, np.nan, 1.0, 7.0, np.nan])
    s = np.array([0, 1, 3, 4])
    e = np.array([4, 1, 4, 4])
    got = range_reduce(x, s, e, np.fmax)
    assert np.array_equal(got, np.array([7.0, np.nan, 7.0, np.nan]), equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(st.lists(series(), min_size=2, max_size=4), st.sampled_from(STATISTICS),
       st.sampled_from([5.0, 30.0]), st.integers(1, 5), st.randoms(use_true_random=False))
def test_several_gpus_in_one_block_match_the_reference(data, kind, width, n_blocks,
                                                       rnd) -> None:
    """GPUs evaluated together (some with no samples in a block) == each GPU alone."""
    w = Window(kind, width)
    got: list[list[np.ndarray]] = [[] for _ in data]
    cuts = [sorted(rnd.sample(range(len(ts) + 1), min(n_blocks - 1, len(ts) + 1)))
            for ts, _ in data]
    for b in range(n_blocks):
        parts = []
        for g, (ts, x) in enumerate(data):
            bounds = [0, *cuts[g], len(ts)]
            lo, hi = (bounds[b], bounds[b + 1]) if b + 1 < len(bounds) else (len(ts), len(ts))
            if b == n_blocks - 1:
                hi = len(ts)
            parts.append((ts[lo:hi], weights(ts)[lo:hi], x[lo:hi]))
        seg = Segments(np.concatenate([p[0] for p in parts]),
                       np.concatenate([p[1] for p in parts]),
                       np.array([len(p[0]) for p in parts]))
        out = w.update_block(seg, np.concatenate([p[2] for p in parts]))
        for g in range(len(data)):
            got[g].append(out[seg.offsets[g]:seg.offsets[g + 1]])
    for g, (ts, x) in enumerate(data):
        want = np.array(reference(kind, width, ts, x))
        np.testing.assert_allclose(np.concatenate(got[g]), want, rtol=1e-9, atol=1e-9,
                                   equal_nan=True)


def test_min_max_of_levels_that_hold_still_match_the_reference() -> None:
    """Flags that do not change and flat memory levels (the per-slot constant fast path):
    a slot flat in one block and changing in the next, one slot without new samples, a
    level that turns NaN, all against the reference."""
    levels = [[7.0, 7.0, 3.0], [0.0, 1.0, 1.0], [5.0, np.nan, 5.0]]  # per GPU, per block
    per_block = 50
    for kind in ("min", "max"):
        w = Window(kind, 30.0)
        got: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in levels]
        for b in range(3):
            parts = []
            for g, lv in enumerate(levels):
                n = 0 if (g == 1 and b == 1) else per_block  # GPU 1 silent in block 1
                ts = 1_700_000_000.0 + b * per_block + np.arange(n, dtype=float)
                parts.append((ts, np.full(n, lv[b])))
            seg = Segments(np.concatenate([p[0] for p in parts]),
                           np.concatenate([np.r_[0.0, np.ones(max(len(p[0]) - 1, 0))][
                               :len(p[0])] if b == 0 else np.ones(len(p[0])) for p in parts]),
                           np.array([len(p[0]) for p in parts]))
            out = w.update_block(seg, np.concatenate([p[1] for p in parts]))
            for g in range(len(levels)):
                got[g].append((parts[g][0], parts[g][1], out[seg.offsets[g]:seg.offsets[g + 1]]))
        for g in range(len(levels)):
            ts = np.concatenate([t for t, _, _ in got[g]])
            x = np.concatenate([v for _, v, _ in got[g]])
            want = np.array(reference(kind, 30.0, ts, x))
            have = np.concatenate([o for _, _, o in got[g]])
            assert np.array_equal(have, want, equal_nan=True), (kind, g)


def test_frac_of_a_flag_that_never_holds_then_holds_matches_the_reference() -> None:
    """Blocks where the flag never holds (0 or missing, the quiet fast path: 0 %), then
    holds, then stops: every block split gives the reference."""
    ts = 1_700_000_000.0 + np.arange(80, dtype=float)
    x = np.where(np.arange(80) % 7 == 3, np.nan, 0.0)
    x[40:48] = 1.0
    d = weights(ts)
    for width in (5.0, 30.0):
        want = np.array(reference("frac", width, ts, x))
        for rows in (80, 10, 3):
            w = Window("frac", width)
            got = np.concatenate([w.update("g", ts[a:a + rows], d[a:a + rows], x[a:a + rows])
                                  for a in range(0, 80, rows)])
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
