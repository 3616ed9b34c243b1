"""Shared fixtures: the real-telemetry folder (skipped when absent) and a manual clock."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from watchdog.clock import ManualClock

REPO = Path(__file__).resolve().parent.parent

# Where agents claim their GPUs (watchdog.store.claims) and keep a memory-only status:
# one folder per test process, so tests running fake-NVML agents side by side (xdist
# workers, other checkouts on the machine) never meet each other or a real agent in
# /run/nvml-watchdog. Subprocesses inherit it.
_RUN = tempfile.mkdtemp(prefix="watchdog-run-")
os.environ["RUNTIME_DIRECTORY"] = _RUN
atexit.register(shutil.rmtree, _RUN, True)
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
