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
