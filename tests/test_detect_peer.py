"""Peer functions on the node grid give numpy's numbers (the median by its own sort)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from watchdog.detect.evaluate import _row_median

VALUES = st.one_of(st.just(np.nan), st.floats(-1e6, 1e6), st.integers(0, 3).map(float))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(
    lambda k: arrays(np.float64, st.tuples(st.integers(1, 20), st.just(k)), elements=VALUES)))
@pytest.mark.slow
def test_row_median_is_numpys_nanmedian(vals: np.ndarray) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows
        want = np.nanmedian(vals, axis=1)
    assert np.array_equal(_row_median(vals), want, equal_nan=True)


def test_a_gpus_job_is_the_gpus_holding_its_share_of_memory_within_5_points() -> None:
    from watchdog.detect.evaluate import JOB_MEMORY_PTS, same_job

    assert JOB_MEMORY_PTS == 5.0
    pct = np.array([[99.0, 94.1, 93.9, 45.0, np.nan]])  # one tick, five GPUs
    used = np.array([[80700.0, 76700.0, 76500.0, 36700.0, np.nan]])
    jobs = same_job(pct, used)[0]
    # 4.9 points apart is one job, 5.1 is not; a GPU whose memory is not read is in no
    # read GPU's job (it compares against every GPU itself)
    assert jobs[0].tolist() == [True, True, False, False, False]
    assert jobs[3].tolist() == [False, False, False, True, False]  # alone
    assert jobs[4].all()  # no memory reading: every GPU is its peer
    small = same_job(np.array([[1.0, 1.0]]), np.array([[1023.0, 2000.0]]))[0]
    assert small.tolist() == [[True, False], [False, True]]  # under 1 GiB holds no job


def test_peer_median_and_job_first_are_taken_over_the_job() -> None:
    from watchdog.detect.evaluate import _by_job, same_job

    util = np.array([[96.0, 95.0, 97.0, 61.0, 99.0]])
    pct = np.array([[99.5, 99.6, 99.4, 47.0, 41.0]])
    used = pct * 800.0
    jobs = same_job(pct, used)
    present = np.ones_like(util, dtype=bool)
    med = _by_job("peer_median", util, present, jobs)[0]
    assert med.tolist() == [96.0, 96.0, 96.0, 61.0, 99.0]  # the foreign ones alone
    first = _by_job("job_first", util, present, jobs)[0]
    assert first.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0]  # each job's lowest index
    gone = present.copy()
    gone[0, 0] = False  # rank 0 missing at this tick: the next one is first
    assert _by_job("job_first", util, gone, jobs)[0].tolist() == [0.0, 1.0, 0.0, 1.0, 1.0]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda k: st.tuples(
    arrays(np.float64, st.tuples(st.integers(1, 12), st.just(k)), elements=VALUES),
    arrays(np.bool_, st.tuples(st.just(12), st.just(k))),
    arrays(np.float64, st.tuples(st.just(12), st.just(k)),
           elements=st.floats(90.0, 95.0)))))
def test_a_node_of_one_job_reduces_as_the_node_does(case) -> None:
    """Where every GPU is in one job (each holds memory within 5 points of the others), a
    peer function over the job is the node's reduction: the evaluator takes that path
    (``Evaluator._one_job``) instead of the ticks x GPUs x GPUs cube."""
    from watchdog.detect.evaluate import _by_job, _reduce, same_job

    m, present, pct = case
    present, pct = present[:len(m)], pct[:len(m)]
    jobs = same_job(pct, pct * 800.0)
    assert jobs.all()
    for fn in ("peer_median", "peer_mean", "peer_min", "peer_max"):
        want = _by_job(fn, m, present, jobs)
        assert np.array_equal(_reduce(fn, m, present), want, equal_nan=True), fn
