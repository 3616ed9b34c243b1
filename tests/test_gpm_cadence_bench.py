"""``bench/gpm_cadence.py``: what a GPM cadence would have reported, and the real H100 hang
replayed at the cadence the NVML source uses (skipped without ``../shared/real-gpu``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpm_cadence", ROOT / "bench" / "gpm_cadence.py")
assert _spec is not None and _spec.loader is not None
gpm_cadence = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpm_cadence)


def test_carried_is_the_mean_since_the_previous_sample_held_until_the_next() -> None:
    ts = np.arange(8.0)
    values = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0])
    got = gpm_cadence.carried(ts, values, [0.0, 1.0, 3.0, 6.0])
    # at 0 nothing is known; at 1 the mean of (0, 1] = 20; at 3 of (1, 3] = 35; at 6 of
    # (3, 6] = 60; carried in between and after the last sample
    np.testing.assert_array_equal(got, [np.nan, 20, 20, 35, 35, 35, 60, 60])


def test_the_sources_cadence_moves_the_real_hang_by_at_most_a_second() -> None:
    from watchdog.sources.nvml.source import GPM_INTERVAL

    if not gpm_cadence.DEFAULT_LOG.is_file():
        pytest.skip(f"{gpm_cadence.DEFAULT_LOG} not present")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "gpm_cadence.py"),
                          "--cadences", f"1,{GPM_INTERVAL:g}"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    rows = [line.split() for line in out.splitlines()[2:]]
    fires = {(r[0], int(r[1])): float(r[3]) for r in rows}
    base = fires[("1s", 0)]
    at = [v for (c, _), v in fires.items() if c == f"{GPM_INTERVAL:g}s"]
    assert len(at) == max(1, int(GPM_INTERVAL)) and 0 < base < 180
    assert all(base <= v <= base + 1.0 for v in at), out
