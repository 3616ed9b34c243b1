"""Shared and skipped window work must be invisible in the numbers.

* windows over a metric the log lacks (or a flag that never holds) cost no running sums,
  yet give exactly what the full computation gives, whatever comes later;
* windows over the same argument at several widths share one set of running sums;
* evidence windows are computed only in blocks where an incident fires.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from tests.test_detect_windows import reference, weights
from watchdog.detect import Detector, RuleSet
from watchdog.detect import windows as W
from watchdog.detect.loader import parse_rules_text
from watchdog.detect.windows import STATISTICS, Layout, Segments, Series, Window, WindowSet
from watchdog.records import DeviceInfo


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


@pytest.mark.parametrize("kind", STATISTICS)
@pytest.mark.parametrize("width", [5.0, 30.0, 120.0])
def test_quiet_blocks_give_the_full_results(kind: str, width: float) -> None:
    ts, x = episodes()
    d = weights(ts)
    whole = Window(kind, width).update("g", ts, d, x)  # one block: never quiet
    np.testing.assert_allclose(whole, reference(kind, width, ts, x), rtol=1e-9, atol=1e-9)
    for step in (1, 7, 25, 64):
        w = Window(kind, width)
        bounds = [*range(0, len(ts), step), len(ts)]
        parts = [w.update("g", ts[a:b], d[a:b], x[a:b]) for a, b in itertools.pairwise(bounds)]
        assert np.array_equal(np.concatenate(parts), whole, equal_nan=True), step


@pytest.mark.parametrize("kind", STATISTICS)
def test_a_metric_the_log_lacks_costs_no_window_sums(kind: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    orig_prefix, orig_range = Layout.prefix, W.range_reduce

    def prefix(self, state, term):  # type: ignore[no-untyped-def]
        calls.append("prefix")
        return orig_prefix(self, state, term)

    def reduce(*a, **k):  # type: ignore[no-untyped-def]
        calls.append("range")
        return orig_range(*a, **k)

    monkeypatch.setattr(Layout, "prefix", prefix)
    monkeypatch.setattr(W, "range_reduce", reduce)
    w = Window(kind, 30.0)
    for k in range(3):
        ts = 1_700_000_000.0 + np.arange(400.0) + 400 * k
        x = np.zeros(400) if kind == "frac" else np.full(400, np.nan)  # frac: never true
        out = w.update_block(Segments(ts, np.ones(400), np.array([100] * 4)), x)
        want = 0.0 if kind in ("frac", "delta", "rate") else np.nan
        assert np.array_equal(out, np.full(400, want), equal_nan=True)
    assert calls == ["prefix"] * 3  # only the plain time weights, shared by every window


def test_widths_over_one_argument_share_their_running_sums(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    ts = 1_700_000_000.0 + np.cumsum(rng.choice([0.5, 1.0, 2.0], 300))
    d = weights(ts)
    x = np.where(rng.random(300) < 0.1, np.nan, rng.random(300) * 100)
    specs = [("mean", 10.0), ("mean", 60.0), ("frac", 10.0), ("delta", 30.0),
             ("rate", 60.0), ("max", 20.0), ("min", 60.0), ("last", 5.0), ("slope", 60.0)]
    alone = {s: Window(*s) for s in specs}
    ws = WindowSet()
    for kind, width in specs:
        ws.add("x", None, kind, width)
    advances: list[int] = []
    orig = Series.advance

    def advance(self, *a):  # type: ignore[no-untyped-def]
        advances.append(1)
        return orig(self, *a)

    monkeypatch.setattr(Series, "advance", advance)
    for a, b in ((0, 90), (90, 91), (91, 300)):
        seg = Segments(ts[a:b], d[a:b], np.array([b - a]))
        for s in specs:
            got = ws.value(seg, "x", *s, lambda: x[a:b])  # noqa: B023
            want = alone[s].update_block(Segments(ts[a:b], d[a:b], np.array([b - a])), x[a:b])
            assert np.array_equal(got, want, equal_nan=True), s
        ws.finish(seg, lambda _arg: x[a:b])  # noqa: B023
    # one advance of the shared series per block (plus one per single window and block)
    assert len(advances) == 3 + 3 * len(specs)


RULES = """
rules:
  - name: hot
    kind: thermal_throttle
    severity: warning
    condition: temperature.gpu > 90
    evidence: {trend: "slope(power.draw, 5m)"}
    summary: "hot, power trend {trend:.2f} W/s"
"""


def test_evidence_windows_are_computed_only_when_an_incident_fires(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, float]] = []
    orig = Series.value

    def value(self, ws, lay, kind, width):  # type: ignore[no-untyped-def]
        asked.append((kind, width))
        return orig(self, ws, lay, kind, width)

    monkeypatch.setattr(Series, "value", value)
    rules = RuleSet(parse_rules_text(RULES))
    n = 400
    frame = pd.DataFrame({"ts": 1_700_000_000.0 + np.arange(n), "uuid": "GPU-0", "index": 0,
                          "power.draw": 300.0 + np.arange(n) * 0.5,
                          "temperature.gpu": np.where(np.arange(n) >= 350, 95.0, 60.0)})
    det = Detector(rules, "h", [DeviceInfo(index=0, uuid="GPU-0")])
    for a in range(0, 300, 100):  # cool blocks: the evidence window is carried, not computed
        det.feed_frame(frame.iloc[a:a + 100])
    assert ("slope", 300.0) not in asked
    det.feed_frame(frame.iloc[300:])
    (inc,) = det.finish()
    assert ("slope", 300.0) in asked
    assert inc.evidence["trend"] == pytest.approx(0.5)
    whole = Detector(rules, "h", [DeviceInfo(index=0, uuid="GPU-0")])
    whole.feed_frame(frame)
    assert [i.to_json() for i in whole.finish()] == [inc.to_json()]


@pytest.mark.parametrize("kind", STATISTICS)
def test_regular_sampling_slices_equal_the_gathers(kind: str) -> None:
    """Large blocks of regular samples (window sums as slice differences) give the bits of
    live ticks (gathers), and the reference's numbers."""
    rng = np.random.default_rng(5)
    n_gpus, n = 3, 400
    ts = 1_700_000_000.0 + np.arange(n, dtype=float)
    xs = [np.where(rng.random(n) < 0.05, np.nan, np.round(rng.random(n) * 50) + g * 100)
          for g in range(n_gpus)]
    for width in (10.0, 60.0):
        big, small = Window(kind, width), Window(kind, width)
        got_big: list[list[np.ndarray]] = [[] for _ in range(n_gpus)]
        got_small: list[list[np.ndarray]] = [[] for _ in range(n_gpus)]
        for w, step, got in ((big, 150, got_big), (small, 1, got_small)):
            for a in range(0, n, step):
                b = min(n, a + step)
                seg = Segments(np.tile(ts[a:b], n_gpus), np.tile(weights(ts)[a:b], n_gpus),
                               np.full(n_gpus, b - a))
                out = w.update_block(seg, np.concatenate([x[a:b] for x in xs]))
                for g in range(n_gpus):
                    got[g].append(out[seg.offsets[g]:seg.offsets[g + 1]])
        for g in range(n_gpus):
            whole = np.concatenate(got_big[g])
            assert np.array_equal(whole, np.concatenate(got_small[g]), equal_nan=True)
            np.testing.assert_allclose(whole, reference(kind, width, ts, xs[g]), rtol=1e-9,
                                       atol=1e-9)
