"""Live tick batching (``Detector(tick_batch_s=…)``): buffered ticks evaluated as one block
give the same incidents, transitions and learned state as evaluating every tick, and an
urgent tick (XID, lost GPU, NVML error) is evaluated at once."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_detect_engine import METRICS, RULES, T0, devices, random_frame, summary_of
from watchdog.detect import Detector, load_rules
from watchdog.records import Sample, XidEvent


def ticks_of(frame: pd.DataFrame, xids: list[XidEvent]) -> list[tuple[float, list[Sample]]]:
    out = []
    for ts, group in frame.groupby("ts", sort=True):
        samples = []
        for r in group.to_dict("records"):
            vals = {m: (None if math.isnan(r[m]) else r[m]) for m in METRICS if m in r}
            mine = tuple(x for x in xids if x.uuid == r["uuid"] and x.ts == r["ts"])
            samples.append(Sample(ts=r["ts"], uuid=r["uuid"], index=r["index"],
                                  values={} if r["lost"] else vals, lost=r["lost"], xids=mine))
        out.append((float(ts), samples))
    return out


def run(rules, ticks, batch_s: float) -> tuple[Detector, list[tuple[str, str, float]]]:
    det = Detector(rules, "h", devices(4), tick_batch_s=batch_s)
    seen = []
    for ts, samples in ticks:
        det.feed_tick(ts, samples)
        seen += [(what, inc.rule, inc.started_at) for what, inc in det.drain()]
    det.flush_ticks()  # the agent's last ticks are evaluated at shutdown (learned_state)
    seen += [(what, inc.rule, inc.started_at) for what, inc in det.drain()]
    return det, seen


def same(a: Detector, b: Detector) -> None:
    assert summary_of(a) == summary_of(b)
    assert a.learned_state() == b.learned_state()
    assert a.learned_levels() == b.learned_levels()
    assert a.dropped_samples == b.dropped_samples


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([2.0, 5.0, 17.0]))
def test_batched_equals_every_tick_property(seed: int, batch_s: float) -> None:
    ticks = ticks_of(*random_frame(seed, n_gpus=3, n_ticks=120))
    want, want_seen = run(RULES, ticks, 0.0)
    got, got_seen = run(RULES, ticks, batch_s)
    # every transition is delivered, in the same order (later, at most batch_s of data time)
    assert got_seen == want_seen
    same(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_equals_every_tick_shipped_rules(seed: int) -> None:
    rules = load_rules()
    ticks = ticks_of(*random_frame(seed))
    want, want_seen = run(rules, ticks, 0.0)
    got, got_seen = run(rules, ticks, 5.0)
    assert got_seen == want_seen
    same(got, want)


def test_batching_defers_healthy_ticks_and_flushes_urgent_ones() -> None:
    det = Detector(RULES, "h", devices(2), tick_batch_s=5.0)

    def tick(t: float, **kw: object) -> None:
        det.feed_tick(t, [Sample(ts=t, uuid=f"GPU-{i}", index=i,
                                 values={"utilization.gpu": 50.0, "power.draw": 300.0},
                                 **kw) for i in range(2)])  # type: ignore[arg-type]

    tick(T0)  # the first tick is evaluated at once
    assert det.pending_ticks == 0
    for k in range(1, 5):
        tick(T0 + k)
    assert det.pending_ticks == 8  # four healthy ticks of two GPUs wait
    tick(T0 + 5)
    assert det.pending_ticks == 0  # five seconds of data: evaluated
    tick(T0 + 6)
    assert det.pending_ticks == 2
    tick(T0 + 7, errors=("nvmlDeviceGetPowerUsage: Timeout",))
    assert det.pending_ticks == 0  # an NVML error is evaluated at once
    tick(T0 + 8)
    x = XidEvent(T0 + 9, "GPU-0", 0, 79, "nvml", None)
    det.feed_tick(T0 + 9, [Sample(ts=T0 + 9, uuid="GPU-0", index=0, xids=(x,))])
    assert det.pending_ticks == 0
    assert [i.rule for i in det.incidents] == ["xid"]
    tick(T0 + 10)
    assert det.pending_ticks == 2
    det.learned_state()  # persistence sees every tick fed so far
    assert det.pending_ticks == 0
