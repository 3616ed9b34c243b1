"""Lanes: a call that overruns its deadline is named, the lane stays busy until it returns."""

from __future__ import annotations

import threading

import pytest

from watchdog.sources.nvml.deadline import Lane, Wedged


def test_result_and_exception_are_handed_back():
    lane = Lane("t")
    assert lane.run(lambda: 42, 5) == 42
    with pytest.raises(ZeroDivisionError):
        lane.run(lambda: 1 / 0, 5)
    assert not lane.busy
    lane.stop()


def test_wedged_call_is_named_and_lane_stays_busy_until_it_returns():
    lane = Lane("t")
    gate = threading.Event()

    def job():
        lane.enter("nvmlDeviceGetPowerUsage")
        gate.wait(10)
        return "late"

    pending = lane.submit(job)
    with pytest.raises(Wedged) as e:
        lane.wait(pending, 0.05)
    assert e.value.call == "nvmlDeviceGetPowerUsage"
    assert str(e.value) == "nvmlDeviceGetPowerUsage did not return within 0.05 s"
    assert lane.busy and lane.inflight[0] == "nvmlDeviceGetPowerUsage"
    gate.set()
    assert pending.done.wait(5) and pending.result == "late"
    assert lane.run(lambda: "next", 5) == "next" and not lane.busy
    lane.stop()
