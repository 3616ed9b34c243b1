"""The healthy-spread bench (``bench/wandb_spread.py``): which temperature changes count as
a healthy run's own drift."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import wandb_spread as WS  # noqa: E402


def test_a_rise_counts_only_at_steady_power_after_the_thermal_lag() -> None:
    """A GPU warming 0.5 C per tick at steady power: every span of ``lag`` ticks rises
    0.5 x lag. A power step inside a span, or within ``settle`` ticks before it, takes the
    spans it touches out (the temperature still follows it); so does an idle tick; a step
    of 2 x STEADY_POWER is steady, a hair more is not."""
    n, lag, settle = 40, 5, 3
    temp = 0.5 * np.arange(n, dtype=float)
    busy = np.ones(n, dtype=bool)
    flat = np.full(n, 0.8)
    got = WS.rises(temp, [flat], busy, lag, settle)
    assert len(got) == n - lag - settle and np.allclose(got, 0.5 * lag)
    for step, kept in ((2 * WS.STEADY_POWER - 1e-9, n - lag - settle),
                       (2 * WS.STEADY_POWER + 1e-3, n - lag - settle - (lag + settle))):
        p = flat.copy()
        p[20:] += step
        assert len(WS.rises(temp, [p], busy, lag, settle)) == kept, step
    idle = busy.copy()
    idle[20] = False
    assert len(WS.rises(temp, [flat], idle, lag, settle)) == n - lag - settle - (lag + settle + 1)
    assert len(WS.rises(temp[:lag + settle], [flat[:lag + settle]], busy[:lag + settle],
                        lag, settle)) == 0
