"""Shared fixtures: the real-telemetry folder (skipped when absent) and a manual clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from watchdog.clock import ManualClock

REPO = Path(__file__).resolve().parent.parent
REAL_TELEMETRY = Path(
    os.environ.get("WATCHDOG_REAL_TELEMETRY", REPO.parent / "shared" / "real-telemetry"))


@pytest.fixture
def real_telemetry() -> Path:
    """The folder of real GPU logs recorded by others; skip when it is not beside the repo."""
    if not REAL_TELEMETRY.is_dir():
        pytest.skip(f"real telemetry not found at {REAL_TELEMETRY}")
    return REAL_TELEMETRY


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_750_000_000.0)
