"""The Detector end to end: block == tick, node grouping, inhibition, input handling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.detect import Detector, RuleSet
from watchdog.detect.loader import parse_rules_text
from watchdog.records import DeviceInfo, Sample, XidEvent

T0 = 1_750_000_000.0
RULES = RuleSet(parse_rules_text("""
rules:
  - name: hang_gpu
    kind: comm_hang
    severity: critical
    condition: >-
      mean(utilization.gpu, 10s) > 90 and mean(power_rel, 10s) < 30
      and not frac(throttle_bad, 10s) > 0
    for: learned(default=20s, min=5s, margin=3s)
    inhibited_by: [hang_node]
    evidence: {util: "mean(utilization.gpu, 10s)", power: "mean(power.draw, 10s)"}
    summary: "util {util:.0f}% at {power:.0f} W on GPU {gpus}"
  - name: hang_node
    kind: comm_hang
    severity: critical
    scope: node
    condition: >-
      count(mean(utilization.gpu, 10s) > 90 and mean(power_rel, 10s) < 30) >= 2
      and mean(utilization.gpu, 10s) > 90 and mean(power_rel, 10s) < 30
    for: 15s
    evidence: {n: "count(mean(utilization.gpu, 10s) > 90)", power: "mean(power.draw, 10s)"}
    summary: "{n:.0f} GPUs hung at {power:.0f} W"
  - name: thermal
    kind: thermal_throttle
    severity: warning
    condition: frac(hw_thermal or sw_thermal, 5s) > 50
    for: 3s
    clear: frac(hw_thermal or sw_thermal, 5s) == 0
    keep_firing_for: 2s
  - name: hw_slow
    kind: hw_slowdown
    severity: warning
    condition: hw_slowdown or hw_power_brake
    for: 2s
    inhibited_by: [thermal_throttle]
  - name: straggler
    kind: straggler
    severity: warning
    scope: node
    condition: >-
      mean(sm_clock_pct, 20s) < 0.8 * peer_median(mean(sm_clock_pct, 20s))
      and count(present(clocks.sm)) >= 3
    for: 10s
  - name: lost
    kind: gpu_lost
    severity: critical
    condition: lost
  - name: xid
    kind: xid
    severity: critical
    condition: xid in (48, 79)
    evidence: {code: xid}
    summary: "XID {code:.0f}"
  - name: ecc
    kind: ecc
    severity: critical
    condition: delta(ecc.errors.uncorrected.volatile.total, 60s) > 0
    keep_firing_for: 30s
"""))
METRICS = ("utilization.gpu", "power.draw", "clocks.sm", "clocks_event_reasons.active",
           "ecc.errors.uncorrected.volatile.total")


def devices(n: int) -> list[DeviceInfo]:
    return [DeviceInfo(index=i, uuid=f"GPU-{i}", power_limit_enforced_w=700.0,
                       clocks_max_sm_mhz=1980.0) for i in range(n)]


def random_frame(seed: int, n_gpus: int = 4, n_ticks: int = 200) -> tuple[pd.DataFrame,
                                                                           list[XidEvent]]:
    """Regime-switching telemetry: busy, hung, idle, throttled, gaps, NaN, jitter."""
    rng = np.random.default_rng(seed)
    dt = rng.choice([0.5, 1.0, 1.0, 2.0, 5.0, 40.0], size=n_ticks, p=[.2, .4, .2, .1, .08, .02])
    ticks = T0 + np.cumsum(dt)
    rows = []
    n_seg = n_ticks // 20 + 1
    node_regime = rng.integers(0, 5, size=n_seg)  # the job: GPUs mostly move together
    for g in range(n_gpus):
        own = np.where(rng.random(n_seg) < 0.3, rng.integers(0, 5, size=n_seg), node_regime)
        regime = np.repeat(own, 20)[:n_ticks]
        jitter = rng.choice([0.0, 0.01], p=[0.8, 0.2]) * g
        ecc = np.cumsum(rng.random(n_ticks) < 0.01).astype(float)
        for i, t in enumerate(ticks):
            if rng.random() < 0.03:
                continue  # missing row
            r = int(regime[i])
            util = [100.0, 100.0, 0.0, 100.0, 60.0][r]
            power = [600.0, 110.0, 70.0, 300.0, 400.0][r] + rng.normal(0, 5)
            mask = [0x4, 0x0, 0x1, 0x48 if g % 2 else 0x88, 0x10][r]
            clock = 1980.0 * (0.6 if (g == 0 and r == 4) else 1.0)
            row = {"ts": t + jitter, "uuid": f"GPU-{g}", "index": g,
                   "lost": bool(rng.random() < 0.01),
                   "utilization.gpu": util, "power.draw": power, "clocks.sm": clock,
                   "clocks_event_reasons.active": float(mask),
                   "ecc.errors.uncorrected.volatile.total": ecc[i]}
            if rng.random() < 0.05:
                row["power.draw"] = math.nan
            rows.append(row)
    frame = pd.DataFrame(rows).sort_values(["ts", "index"], kind="stable")
    if n_gpus > 2:  # GPU 2 vanishes for a while (no rows, no lost flag) and comes back
        a = int(rng.integers(0, n_ticks // 2))
        gone = (frame["index"] == 2) & frame["ts"].between(ticks[a], ticks[a + n_ticks // 3])
        frame = frame[~gone]
    frame = frame.reset_index(drop=True)
    for m in METRICS:
        frame.loc[frame["lost"], m] = math.nan
    xid_rows = frame.sample(n=3, random_state=seed)
    xids = [XidEvent(ts=float(r.ts), uuid=r.uuid, index=int(r.index), code=int(c))
            for r, c in zip(xid_rows.itertuples(), [79, 13, 48], strict=True)]
    return frame, xids


def summary_of(det: Detector) -> list[tuple]:
    return [(i.rule, tuple(i.gpus), i.started_at, i.fired_at, i.resolved_at, i.summary,
             tuple(sorted((k, v) for k, v in i.evidence.items())))
            for i in det.finish()]


def by_frames(frame: pd.DataFrame, xids: list[XidEvent], cuts: list[int]) -> Detector:
    det = Detector(RULES, "h", devices(4))
    bounds = [0, *sorted(set(cuts)), len(frame)]
    todo = list(xids)
    for a, b in itertools.pairwise(bounds):
        part = frame.iloc[a:b]
        hi = part["ts"].max() if len(part) else -math.inf
        mine = [x for x in todo if x.ts <= hi]  # each event once, with the rows it precedes
        todo = [x for x in todo if x.ts > hi]
        det.feed_frame(part, mine)
    return det


def by_ticks(frame: pd.DataFrame, xids: list[XidEvent]) -> Detector:
    det = Detector(RULES, "h", devices(4))
    for ts, group in frame.groupby("ts", sort=True):
        samples = []
        for r in group.to_dict("records"):
            vals = {m: (None if math.isnan(r[m]) else r[m]) for m in METRICS if m in r}
            mine = tuple(x for x in xids if x.uuid == r["uuid"] and x.ts == r["ts"])
            samples.append(Sample(ts=r["ts"], uuid=r["uuid"], index=r["index"],
                                  values={} if r["lost"] else vals, lost=r["lost"], xids=mine))
        det.feed_tick(float(ts), samples)
    return det


def test_random_frames_fire_many_kinds() -> None:
    frame, xids = random_frame(1)
    det = Detector(RULES, "h", devices(4))
    det.feed_frame(frame, xids)
    rules = {i.rule for i in det.finish()}
    assert {"hang_gpu", "hang_node", "thermal", "hw_slow", "lost", "xid", "ecc"} <= rules


@pytest.mark.parametrize("seed", [1, 2])
def test_block_equals_tick_on_random_frames(seed: int) -> None:
    frame, xids = random_frame(seed)
    whole = Detector(RULES, "h", devices(4))
    whole.feed_frame(frame, xids)
    want = summary_of(whole)
    assert len(want) >= 5
    assert summary_of(by_ticks(frame, xids)) == want
    rng = np.random.default_rng(seed)
    for _ in range(2):
        cuts = sorted(rng.integers(1, len(frame), size=rng.integers(1, 30)).tolist())
        assert summary_of(by_frames(frame, xids, cuts)) == want


def test_block_equals_tick_on_every_split() -> None:
    frame, xids = random_frame(7, n_gpus=2, n_ticks=50)
    whole = Detector(RULES, "h", devices(4))
    whole.feed_frame(frame, xids)
    want = summary_of(whole)
    for cut in range(1, len(frame)):
        assert summary_of(by_frames(frame, xids, [cut])) == want, cut


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(1, 500), max_size=20))
def test_block_equals_tick_property(seed: int, cuts: list[int]) -> None:
    frame, xids = random_frame(seed, n_gpus=3, n_ticks=80)
    whole = Detector(RULES, "h", devices(4))
    whole.feed_frame(frame, xids)
    cuts = [c for c in cuts if c < len(frame)]
    assert summary_of(by_frames(frame, xids, cuts)) == summary_of(whole)


def steady(n_gpus: int, seconds: int, **per_gpu: object) -> pd.DataFrame:
    """1 Hz frame; per-GPU overrides are functions (gpu, t) -> value."""
    rows = []
    for t in range(seconds):
        for g in range(n_gpus):
            row = {"ts": T0 + t, "uuid": f"GPU-{g}", "index": g, "lost": False,
                   "utilization.gpu": 100.0, "power.draw": 600.0, "clocks.sm": 1980.0,
                   "clocks_event_reasons.active": 4.0}
            for k, fn in per_gpu.items():
                row[k.replace("__", ".")] = fn(g, t)  # type: ignore[operator]
            rows.append(row)
    return pd.DataFrame(rows)


def test_whole_node_hang_is_one_incident_listing_every_gpu() -> None:
    # busy for 60 s (learns the busy level), then every GPU hangs at 100 % and 110 W
    frame = steady(4, 200, power__draw=lambda g, t: 600.0 if t < 60 else 110.0)
    det = Detector(RULES, "h", devices(4))
    det.feed_frame(frame)
    incs = det.finish()
    hang = [i for i in incs if i.kind == "comm_hang"]
    assert len(hang) == 1, incs
    inc = hang[0]
    assert inc.rule == "hang_node" and inc.gpus == ["0", "1", "2", "3"]
    assert inc.uuids == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    # 10 s mean of util > 90 and power_rel < 30 from t ~ 63; fires 15 s later
    assert inc.fired_at - inc.started_at == pytest.approx(15.0, abs=1.0)
    assert inc.summary == "4 GPUs hung at 110 W"
    assert inc.resolved_at is None


def test_one_gpu_hang_is_a_gpu_incident() -> None:
    frame = steady(4, 200, power__draw=lambda g, t: 110.0 if (g == 2 and t >= 60) else 600.0)
    det = Detector(RULES, "h", devices(4))
    det.feed_frame(frame)
    (inc,) = det.finish()
    assert (inc.rule, inc.gpus) == ("hang_gpu", ["2"])
    assert inc.fired_at - inc.started_at == 20.0  # learned default, no history
    assert inc.evidence["for_s"] == 20.0 and inc.evidence["learned_longest_s"] is None
    assert inc.summary == "util 100% at 110 W on GPU 2"


def test_learned_for_tracks_legitimate_waits_and_persists() -> None:
    def power(g: int, t: int) -> float:
        if g != 1 or t < 60:
            return 600.0
        if t < 72:  # a checkpoint wait: low power for 12 s, ends on its own
            return 110.0
        if t < 150:
            return 600.0
        return 110.0  # a real hang from 150 s

    det = Detector(RULES, "h", devices(2))
    det.feed_frame(steady(2, 300, power__draw=power))
    (inc,) = det.finish()
    longest = det.learned_state()["hang_gpu"]["longest_s"]
    assert longest is not None and 5.0 <= longest <= 15.0  # as the 10 s means saw it
    assert inc.evidence["for_s"] == pytest.approx(max(5.0, longest + 3.0))
    assert inc.fired_at - inc.started_at == pytest.approx(inc.evidence["for_s"], abs=1.0)
    # persisted state is used by a fresh detector from the start
    fresh = Detector(RULES, "h", devices(2))
    fresh.load_learned_state(det.learned_state())
    fresh.feed_frame(steady(2, 100, power__draw=lambda g, t: 110.0 if g == 1 and t >= 30
                            else 600.0))
    (inc2,) = fresh.finish()
    assert inc2.evidence["for_s"] == pytest.approx(longest + 3.0)


def test_hw_slowdown_with_thermal_is_one_incident() -> None:
    frame = steady(1, 40, clocks_event_reasons__active=lambda g, t: 0x48 if 10 <= t < 30 else 4)
    det = Detector(RULES, "h", devices(1))
    det.feed_frame(frame)
    assert [i.kind for i in det.finish()] == ["thermal_throttle"]
    alone = steady(1, 40, clocks_event_reasons__active=lambda g, t: 0x88 if 10 <= t < 30 else 4)
    det = Detector(RULES, "h", devices(1))
    det.feed_frame(alone)
    (inc,) = det.finish()
    assert (inc.kind, inc.started_at - T0, inc.fired_at - T0, inc.resolved_at - T0) == (
        "hw_slowdown", 10.0, 12.0, 30.0)


def test_straggler_compares_with_peers() -> None:
    frame = steady(4, 120, clocks__sm=lambda g, t: 1100.0 if (g == 3 and t >= 30) else 1980.0)
    det = Detector(RULES, "h", devices(4))
    det.feed_frame(frame)
    (inc,) = det.finish()
    assert (inc.kind, inc.gpus) == ("straggler", ["3"])


def test_drain_reports_transitions_in_time_order() -> None:
    frame = steady(1, 60, clocks_event_reasons__active=lambda g, t: 0x88 if 10 <= t < 20 else 4,
                   power__draw=lambda g, t: 600.0)
    det = Detector(RULES, "h", devices(1))
    det.feed_frame(frame)
    det.finish()
    got = [(w, i.kind) for w, i in det.drain()]
    assert got == [("firing", "hw_slowdown"), ("resolved", "hw_slowdown")]
    assert det.drain() == []


def test_out_of_order_and_repeated_samples_are_dropped_and_counted() -> None:
    frame = steady(1, 60, clocks_event_reasons__active=lambda g, t: 0x88 if t >= 40 else 4)
    shuffled = pd.concat([frame.iloc[:30], frame.iloc[[5, 29]], frame.iloc[30:]])
    det = Detector(RULES, "h", devices(1))
    det.feed_frame(shuffled)
    (inc,) = det.finish()
    assert inc.evidence["dropped_samples"] == 2
    ref = Detector(RULES, "h", devices(1))
    ref.feed_frame(frame)
    (want,) = ref.finish()
    assert (inc.started_at, inc.fired_at) == (want.started_at, want.fired_at)


def test_gpu_appearing_mid_log_and_unknown_gpus() -> None:
    frame = steady(2, 60, power__draw=lambda g, t: 600.0)
    frame = frame[(frame["index"] == 0) | (frame["ts"] >= T0 + 30)]
    late = frame["index"] == 1
    frame.loc[late & (frame["ts"] >= T0 + 40), "clocks_event_reasons.active"] = float(0x88)
    det = Detector(RULES, "h", devices(1))  # GPU-1 not in the inventory: learnt from data
    det.feed_frame(frame)
    (inc,) = det.finish()
    assert (inc.kind, inc.gpus, inc.uuids) == ("hw_slowdown", ["1"], ["GPU-1"])


def test_lost_gpu_and_xid_fire_within_one_sample() -> None:
    frame = steady(2, 30, lost=lambda g, t: g == 1 and t >= 12)
    frame.loc[frame["lost"], ["utilization.gpu", "power.draw"]] = math.nan
    xids = [XidEvent(ts=T0 + 7.5, uuid="GPU-0", index=0, code=79)]
    det = Detector(RULES, "h", devices(2))
    det.feed_frame(frame, xids)
    got = {(i.kind, tuple(i.gpus), i.fired_at - T0) for i in det.finish()}
    assert got == {("gpu_lost", ("1",), 12.0), ("xid", ("0",), 8.0)}


def test_feed_frame_holds_back_the_last_tick_until_finish() -> None:
    frame = steady(1, 10, lost=lambda g, t: t == 9)
    det = Detector(RULES, "h", devices(1))
    det.feed_frame(frame)
    assert det.incidents == []
    assert [i.kind for i in det.finish()] == ["gpu_lost"]


def test_vanished_gpu_is_lost_until_it_reports_again() -> None:
    frame = steady(2, 100)
    frame = frame[(frame["index"] == 0) | (frame["ts"] < T0 + 20) | (frame["ts"] >= T0 + 80)]
    det = Detector(RULES, "h", devices(2))
    det.feed_frame(frame)
    (inc,) = det.finish()
    # last sample at 19 s; first tick more than 30 s later is 50 s; back at 80 s
    assert (inc.kind, inc.gpus, inc.fired_at - T0, inc.resolved_at - T0) == (
        "gpu_lost", ["1"], 50.0, 80.0)
    ticks = by_ticks(frame, [])
    assert summary_of(ticks) == summary_of(det)


def test_end_of_input_is_not_a_vanished_gpu() -> None:
    det = Detector(RULES, "h", devices(2))
    det.feed_frame(steady(2, 50))
    det.feed_frame(steady(2, 200).iloc[200:])  # both GPUs resume after a 50 s pause
    assert det.finish() == []


def test_large_frames_are_cut_at_ticks_without_changing_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from watchdog.detect import intake

    frame, xids = random_frame(4, n_gpus=3, n_ticks=80)
    whole = Detector(RULES, "h", devices(4))
    whole.feed_frame(frame, xids)
    want = summary_of(whole)
    monkeypatch.setattr(intake, "MAX_BLOCK_ROWS", 7)
    cut = Detector(RULES, "h", devices(4))
    cut.feed_frame(frame, xids)
    assert summary_of(cut) == want


def test_gpus_joining_a_firing_node_incident_are_listed() -> None:
    # GPUs 0-2 hang at 60 s; GPU 3 joins them at 120 s, after the node incident fired
    frame = steady(4, 200, power__draw=lambda g, t: 110.0 if t >= (120 if g == 3 else 60)
                   else 600.0)
    det = Detector(RULES, "h", devices(4))
    det.feed_frame(frame)
    (inc,) = det.finish()
    assert inc.rule == "hang_node" and inc.gpus == ["0", "1", "2", "3"]
    assert inc.fired_at - T0 < 120
    # evidence is that of the firing moment: the mean power of the GPUs hung then (0-2)
    assert inc.evidence["power"] == pytest.approx(110.0)


def test_a_gpu_joins_a_firing_node_incident_only_after_holding_for_its_for() -> None:
    """GPUs 0-1 hang from 60 s (fires at ~85 s, for: 15s); GPU 2 looks hung for 8 s only
    (shorter than the for:) and must not be listed; GPU 3 from 120 s on and is listed.
    The same holds fed tick by tick, where every block is one tick (the run start of a
    GPU's condition is carried across blocks)."""
    def power(g: int, t: int) -> float:
        if g in (0, 1):
            return 110.0 if t >= 60 else 600.0
        if g == 2:
            return 110.0 if 130 <= t < 138 else 600.0
        return 110.0 if t >= 150 else 600.0

    frame = steady(4, 240, power__draw=power)
    for det in (Detector(RULES, "h", devices(4)), by_ticks(frame, [])):
        if not det.incidents:
            det.feed_frame(frame)
        (inc,) = det.finish()
        assert inc.rule == "hang_node" and inc.gpus == ["0", "1", "3"]


def test_a_clear_test_that_learns_sees_every_block() -> None:
    """A gpu rule's clear test is left out of blocks that cannot use it, unless it names a
    learned signal: the busy level it compares with is learned from the early blocks
    too, so the incident resolves at the same time whatever the block size."""
    rules = RuleSet(parse_rules_text("""
rules:
  - name: idle_low
    kind: stall
    severity: warning
    condition: utilization.gpu < 1 and power.draw < 200
    for: 0s
    clear: power.draw > 0.5 * power_busy_w
"""))
    # busy (100 %, 400 W) until 60 s, half busy until 100 s, idle and low until 130 s
    # (fires), idle at 300 W from 130 s (clears: above half the learned busy level)
    frame = steady(1, 170,
                   utilization__gpu=lambda g, t: 100.0 if t < 60 else (50.0 if t < 100 else 0.0),
                   power__draw=lambda g, t: 400.0 if t < 100 else (100.0 if t < 130 else 300.0))
    got = []
    for rows in (150, 20):
        det = Detector(rules, "h", devices(1))
        for a in range(0, len(frame), rows):
            det.feed_frame(frame.iloc[a:a + rows])
        (inc,) = det.finish()
        got.append((inc.started_at - T0, inc.resolved_at))
    # busy is 400 W (learned while busy); without it the limit (700 W) never clears at 300 W
    assert got[0] == got[1] and got[0][0] == 100.0 and got[0][1] == T0 + 130.0
