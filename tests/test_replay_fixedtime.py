"""nvidia-smi timestamps read from the bytes equal the general timestamp parser's."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.sources.replay.convert import parse_timestamps
from watchdog.sources.replay.fixedtime import times, width_of

moments = st.datetimes(min_value=dt.datetime(1991, 1, 1), max_value=dt.datetime(2099, 12, 31))


def general(texts: list[str]) -> np.ndarray:
    return parse_timestamps(pd.Series(texts), tz=None, where=lambda r: f"row {r}")


@settings(max_examples=60, deadline=None)
@given(st.lists(moments, min_size=1, max_size=40), st.booleans(), st.booleans())
def test_same_seconds_as_the_general_parser(when: list[dt.datetime], ms: bool,
                                            final_newline: bool) -> None:
    fmt = "%Y/%m/%d %H:%M:%S"
    texts = [w.strftime(fmt) + (f".{w.microsecond // 1000:03d}" if ms else "") for w in when]
    data = "\n".join(f"{t}, 0, GPU-0, 100" for t in texts) + ("\n" if final_newline else "")
    width = width_of(data.encode())
    assert width == (23 if ms else 19)
    secs = times(data.encode(), width, len(texts))
    assert secs is not None
    assert np.array_equal(secs, general(texts))
    assert len(secs) == len(texts)  # one value per line


@pytest.mark.parametrize("data", [
    b"2024/02/30 10:00:00.000, 0\n",  # no such day
    b"2024/13/01 10:00:00.000, 0\n",  # no such month
    b"2024/01/01 24:00:00.000, 0\n",  # no such hour
    b"2024/01/01 10:00:00.000, 0\n\n2024/01/01 10:00:01.000, 0\n",  # a blank line
    b"2024/01/01 10:00:00.000, 0\n2024-01-01 10:00:01.000, 0\n",  # another layout
    b"2024/01/01 10:00:00.000, 0\n2024/01/01 10:0a:01.000, 0\n",  # not a digit
    b"2024/01/01 10:00:00.0000, 0\n",  # wider than the first line said
])
def test_anything_but_the_exact_layout_is_left_to_the_general_parser(data: bytes) -> None:
    rows = data.count(b"\n") - data.count(b"\n\n")
    assert times(data, 23, rows) is None


def test_layouts_it_takes_on() -> None:
    assert width_of(b"2026/04/19 14:28:10.123, 0, GPU-1") == 23
    assert width_of(b"2026/04/19 14:28:10, 0") == 19
    assert width_of(b"2026-04-19T14:28:10Z, 0") is None
    assert width_of(b"1776608890.123, 0") is None
