"""The shipped rules on a real H100's job change (tests/fixtures/real-gpu/h100-job-change,
recorded on one): quiet as logged, stripped of the limit, clocks, reason bits, memory
total and name, and thinned to 10 and 60 s; a hung collective written in 22 s into the
second job is found in time (or, stripped, the replay says it cannot judge yet); a stall
there is said, not judged: 22 s of a job cannot tell a stall from a pause in work that
comes in bursts (a stall is judged after 10 min of steady work)."""

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
    busy_span=20.0,  # the first 20 s at >= 80 % from there: 21:05:26, 22 s into the job
    stall_lead_s=0.0)  # the stall strikes there, not after more of the job's work
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
    """The hang: as logged, always found; stripped, the rule may say it cannot judge yet.
    The stall: always said (the job's 22 s cannot be judged). Never a silent miss, never
    late, never a false page."""
    res = recall.run_case(LOG, kind, subset, step, rules)
    if kind == "stall":
        allowed: tuple[str, ...] = ("said",)
    else:
        allowed = ("found",) if subset == "as logged" else ("found", "said")
    assert res.outcome in allowed, (res.outcome, res.tta, res.notes)
    assert res.false == []
