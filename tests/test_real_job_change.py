"""The shipped rules on a real H100's job change (tests/fixtures/real-gpu/h100-job-change,
recorded on a lent GPU): quiet as logged, stripped of the limit, clocks, reason bits, memory
total and name, and thinned to 10 and 60 s; a hung collective and a stalled job written in
22 s into the second job are found in time (or, stripped, the replay says it cannot judge
yet)."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.detect import load_rules
from watchdog.testing import recall

pytestmark = pytest.mark.slow

LOG = recall.LogCase(
    label="fixtures/real-gpu/h100-job-change",
    path=Path(__file__).parent / "fixtures" / "real-gpu" / "h100-job-change" / "smi.csv",
    mapping=None, faults=("comm_hang", "stall"),
    idle_w=122.0,  # the README: this H100 with a context open and nothing running
    after_s=175.0,  # 21:05:09, five seconds into the second job
    busy_span=20.0)  # the first 20 s at >= 80 % from there: 21:05:26, 22 s into the job
SUBSETS = ("as logged", "-limit-clocks-reasons-total-name")
STEPS = (None, 10.0, 60.0)


@pytest.fixture(scope="module")
def rules():
    return load_rules()


@pytest.mark.parametrize("subset", SUBSETS)
@pytest.mark.parametrize("step", STEPS)
def test_the_job_change_checkpoints_and_slowed_gpu_page_nothing(rules, subset, step) -> None:
    res = recall.run_case(LOG, None, subset, step, rules)
    assert res.false == []


@pytest.mark.parametrize("kind", LOG.faults)
@pytest.mark.parametrize("subset", SUBSETS)
@pytest.mark.parametrize("step", STEPS)
def test_a_fault_right_after_the_job_change_is_found_in_time(rules, kind, subset,
                                                              step) -> None:
    """As logged, always found. Stripped, the hang rule may say it cannot judge yet (the
    stripped 1 s log: the first job never held > 90 % for 30 s at 1 s, so the GPU was
    never seen working) but never misses silently or late."""
    res = recall.run_case(LOG, kind, subset, step, rules)
    allowed = ("found",) if subset == "as logged" else ("found", "said")
    assert res.outcome in allowed, (res.outcome, res.tta, res.notes)
    assert res.false == []
