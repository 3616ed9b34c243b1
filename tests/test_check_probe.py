"""Burst collection for ``watchdog check``: when readings are taken (on an injected clock)
and which part of a recorded log is judged."""

from __future__ import annotations

from watchdog.check.probe import burst_live, burst_recorded, readings
from watchdog.clock import ManualClock
from watchdog.records import DeviceInfo, Sample


class TinySource:
    """A minimal LiveSource: two GPUs, records the times it was asked to sample."""

    host = "tiny"

    def __init__(self) -> None:
        self.asked: list[float] = []

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(index=i, uuid=f"GPU-{i}") for i in range(2)]

    def sample(self, now: float) -> list[Sample]:
        self.asked.append(now)
        return [Sample(ts=now, uuid=f"GPU-{i}", index=i, values={"utilization.gpu": 50.0})
                for i in range(2)]

    def close(self) -> None:
        pass


def test_number_of_readings_fits_in_the_duration():
    assert readings(2.0, 0.5) == 4  # at 0, 0.5, 1.0, 1.5 s: never past 2 s
    assert readings(1.0, 0.3) == 4  # 0, 0.3, 0.6, 0.9
    assert readings(0.0, 0.5) == 1  # --duration 0: one reading
    assert readings(0.1, 0.5) == 1


def test_burst_reads_every_interval_on_the_injected_clock():
    clock = ManualClock(1000.0)
    src = TinySource()
    b = burst_live(src, clock, duration=2.0, interval=0.5)
    assert src.asked == [1000.0, 1000.5, 1001.0, 1001.5]
    assert (b.end, b.span, b.host) == (1001.5, 1.5, "tiny")
    assert [len(v) for v in b.samples.values()] == [4, 4]


def test_slow_start_up_skips_missed_slots_instead_of_running_late():
    """t0 is before a start-up that took 1.2 s: read at once, then only the 1.5 s slot."""
    clock = ManualClock(1001.2)
    src = TinySource()
    b = burst_live(src, clock, duration=2.0, interval=0.5, t0=1000.0)
    assert src.asked == [1001.2, 1001.5]
    assert abs(b.span - 0.3) < 1e-9


def test_start_up_longer_than_the_budget_still_reads_once():
    clock = ManualClock(1005.0)
    src = TinySource()
    burst_live(src, clock, duration=2.0, interval=0.5, t0=1000.0)
    assert src.asked == [1005.0]


def _ticks(times, gpus=(0, 1)):
    return [(t, [Sample(ts=t, uuid=f"GPU-{i}", index=i) for i in gpus]) for t in times]


def test_recorded_burst_keeps_only_the_last_duration():
    devices = [DeviceInfo(index=i, uuid=f"GPU-{i}") for i in range(2)]
    b = burst_recorded("log", devices, iter(_ticks([0.0, 1.0, 2.0, 3.0, 4.0])), 2.0)
    assert [s.ts for s in b.samples["GPU-0"]] == [2.0, 3.0, 4.0]
    assert (b.end, b.span) == (4.0, 2.0)


def test_gpu_missing_from_the_end_of_a_log_has_no_samples():
    devices = [DeviceInfo(index=i, uuid=f"GPU-{i}") for i in range(2)]
    ticks = _ticks([0.0, 1.0]) + _ticks([5.0, 6.0], gpus=(0,))
    b = burst_recorded("log", devices, iter(ticks), 2.0)
    assert b.samples["GPU-1"] == [] and len(b.samples["GPU-0"]) == 2


def test_empty_log_gives_no_samples():
    b = burst_recorded("log", [], iter([]), 2.0)
    assert b.samples == {} and b.span == 0.0
