"""Windows over a metric the log lacks (or a flag that never holds) skip their arithmetic.

The skip must be invisible: the same numbers (bit for bit) and the same carried state as
the full computation, whatever comes later. Checked against the full computation of a
window that never takes the shortcut, and against the slow reference.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.test_detect_windows import reference, weights
from watchdog.detect import windows
from watchdog.detect.windows import KINDS, Segments, Window


class Full(Window):
    """A window that never takes the quiet shortcut (the full computation)."""

    def _quiet(self) -> bool:
        return False


def episodes() -> tuple[np.ndarray, np.ndarray]:
    """Absent, then present, then absent again for longer than any width, then present;
    zeros in between (a flag that does not hold)."""
    ts = 1_700_000_000.0 + np.cumsum(np.r_[np.full(40, 1.0), np.full(30, 2.0), 50.0,
                                           np.full(200, 1.0), np.full(30, 0.5)])
    x = np.full(len(ts), np.nan)
    x[40:70] = np.linspace(0.0, 90.0, 30)
    x[75:80] = 0.0
    x[271:] = np.r_[np.zeros(10), np.arange(20.0)]
    return ts, x


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("width", [5.0, 30.0, 120.0])
def test_quiet_blocks_give_the_full_results(kind: str, width: float) -> None:
    ts, x = episodes()
    d = weights(ts)
    full = Full(kind, width).update("g", ts, d, x)
    np.testing.assert_allclose(full, reference(kind, width, ts, x), rtol=1e-9, atol=1e-9)
    for step in (1, 7, 25, 64):
        w = Window(kind, width)
        bounds = [*range(0, len(ts), step), len(ts)]
        parts = [w.update("g", ts[a:b], d[a:b], x[a:b]) for a, b in itertools.pairwise(bounds)]
        assert np.array_equal(np.concatenate(parts), full, equal_nan=True), step


@pytest.mark.parametrize("kind", KINDS)
def test_a_metric_the_log_lacks_costs_no_window_sums(kind: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    orig_sums, orig_range = Window._sums, windows.range_reduce

    def sums(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return orig_sums(self, *a, **k)

    def reduce(*a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return orig_range(*a, **k)

    monkeypatch.setattr(Window, "_sums", sums)
    monkeypatch.setattr(windows, "range_reduce", reduce)
    w = Window(kind, 30.0)
    ts = 1_700_000_000.0 + np.arange(400.0)
    counts = np.array([100, 100, 100, 100])
    x = np.zeros(400) if kind == "frac" else np.full(400, np.nan)  # frac: never true
    seg = Segments(ts, np.ones(400), counts)
    out = w.update_block(seg, x)
    want = 0.0 if kind in ("frac", "delta", "rate") else np.nan
    assert np.array_equal(out, np.full(400, want), equal_nan=True)
    # frac still sums its time weights (its denominator), once per width and block
    assert len(calls) == (1 if kind == "frac" else 0)


def test_frac_windows_of_a_width_share_their_time_sums() -> None:
    ts = 1_700_000_000.0 + np.arange(300.0)
    seg_args = (ts, np.r_[0.0, np.ones(299)], np.array([150, 150]))
    rng = np.random.default_rng(0)
    flags = [(rng.random(300) < p).astype(float) for p in (0.0, 0.3, 0.9)]
    alone = [Window("frac", 20.0) for _ in flags]
    together = [Window("frac", 20.0) for _ in flags]
    for lo, hi in ((0, 100), (100, 220), (220, 300)):
        half = [(lo // 2, hi // 2), (150 + lo // 2, 150 + hi // 2)]
        idx = np.r_[np.arange(*half[0]), np.arange(*half[1])]
        counts = np.array([half[0][1] - half[0][0], half[1][1] - half[1][0]])
        shared = Segments(seg_args[0][idx], seg_args[1][idx], counts)
        for w_alone, w_tog, f in zip(alone, together, flags, strict=True):
            own = Segments(seg_args[0][idx], seg_args[1][idx], counts)
            a = w_alone.update_block(own, f[idx])
            b = w_tog.update_block(shared, f[idx])
            assert np.array_equal(a, b, equal_nan=True)
    assert together[0].tail_pre["d"] is together[2].tail_pre["d"]
