"""False-positive guard on real logs: ``watchdog check``'s judge, slid over every 2-second
window of real healthy telemetry, finds nothing. The logs hold the traps the probe must not
fall into: 100 % utilization at 15 W with the SM clock locked at 525 MHz (DarshEllisd), and
memory held at 94 % by an inference server (fridanl)."""

from __future__ import annotations

import pytest

from watchdog.check.judge import judge
from watchdog.check.probe import burst_recorded
from watchdog.sources import SourceOptions, open_recorded

pytestmark = pytest.mark.real_telemetry

LOGS = [
    "DarshEllisd__GPU-Power-Capping-/baseline_r1_20260419_142810_power.csv",
    "DarshEllisd__GPU-Power-Capping-/clk525_r1_20260419_164051_power.csv",
    "DarshEllisd__GPU-Power-Capping-/clk1005_r1_20260419_152809_power.csv",
    "DarshEllisd__GPU-Power-Capping-/clk1905_r1_20260419_145953_power.csv",
    "fridanl__thesis-mas/nvidia-smi.log",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", LOGS)
def test_no_problem_in_any_window_of_a_healthy_real_log(real_telemetry, name):
    rec = open_recorded(str(real_telemetry / name), SourceOptions())
    ticks = list(rec.ticks())
    devices = rec.devices()
    judged = 0
    for k in range(len(ticks)):
        if k and ticks[k][0] - ticks[judged][0] < 1.0:  # one window per second of log
            continue
        judged = k
        b = burst_recorded(rec.host, devices, iter(ticks[:k + 1]), 2.0)
        v = judge(b.devices, b.samples, host=b.host, checked_at=b.end, duration_s=b.span)
        assert v.problems == [], f"{name} at {b.end}: {v.problems}"
    assert judged > 20  # the whole log was walked, not just its start
