"""The engine's shortcuts for regular blocks give exactly what their definitions give."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from watchdog.detect.learned import PowerLevels
from watchdog.detect.rows import by_gpu as _by_gpu
from watchdog.detect.rows import factorize as _factorize
from watchdog.detect.rows import ticks as _ticks
from watchdog.detect.signals import Block
from watchdog.records import DeviceInfo


@st.composite
def blocks(draw):  # type: ignore[no-untyped-def]
    """Rows sorted by time; usually every GPU once per tick in one order, sometimes not."""
    k = draw(st.integers(1, 5))
    n_ticks = draw(st.integers(1, 12))
    names = [f"GPU-{i}" for i in draw(st.permutations(range(k)))]
    rows = [(float(t), names[g]) for t in range(n_ticks) for g in range(k)]
    if draw(st.booleans()):  # drop a row, swap two GPUs of a tick, or repeat a GPU
        i = draw(st.integers(0, len(rows) - 1))
        how = draw(st.sampled_from(["drop", "swap", "repeat"]))
        if how == "drop":
            rows.pop(i)
        elif how == "swap" and k > 1 and i + 1 < len(rows) and rows[i][0] == rows[i + 1][0]:
            rows[i], rows[i + 1] = (rows[i][0], rows[i + 1][1]), (rows[i + 1][0], rows[i][1])
        else:
            rows[i] = (rows[i][0], names[0])
    ts = np.array([t for t, _ in rows])
    uuid = np.array([u for _, u in rows], dtype=object)
    return ts, uuid


@settings(max_examples=150, deadline=None)
@given(blocks())
def test_factorize_and_grouping_match_pandas_and_a_stable_argsort(block) -> None:  # type: ignore[no-untyped-def]
    ts, uuid = block
    codes, uniq = _factorize(uuid, ts)
    want_codes, want_uniq = pd.factorize(uuid)
    assert codes.tolist() == want_codes.tolist() and list(uniq) == list(want_uniq)
    assert _by_gpu(codes, len(uniq)).tolist() == np.argsort(codes, kind="stable").tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), max_size=8, unique=True), min_size=1,
                max_size=4), st.booleans())
def test_ticks_are_the_distinct_sample_times(per_gpu: list[list[int]], same: bool) -> None:
    if same:  # every GPU read at the same times (the shortcut)
        per_gpu = [per_gpu[0]] * len(per_gpu)
    parts = [np.sort(np.array(p, dtype=float)) for p in per_gpu]
    ts = np.concatenate(parts) if parts else np.empty(0)
    n = len(ts)
    b = Block(ts, np.ones(n), np.array([len(p) for p in parts]),
              [DeviceInfo(index=i, uuid=str(i)) for i in range(len(parts))], {},
              np.zeros(n, bool), np.full(n, np.nan), np.zeros(n), PowerLevels())
    assert _ticks(b).tolist() == np.unique(ts).tolist()


@settings(max_examples=100, deadline=None)
@given(blocks())
def test_replay_gpu_count_is_nunique(block) -> None:  # type: ignore[no-untyped-def]
    from watchdog.pipeline.replay import gpu_count

    ts, uuid = block
    frame = pd.DataFrame({"ts": ts, "uuid": uuid.astype(str)})
    assert gpu_count(frame) == frame["uuid"].nunique()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20).map(float), max_size=30), st.booleans())
def test_unique_of_block_times_is_numpys(vals: list[float], ordered: bool) -> None:
    from watchdog.detect.rows import unique as _unique

    a = np.array(sorted(vals) if ordered else vals, dtype=float)
    assert _unique(a).tolist() == np.unique(a).tolist()


def test_membership_of_a_signal_the_block_lacks_is_false() -> None:
    from tests.test_detect_lang import _block, ev

    blk = _block({"power.draw": [1.0, 2.0, 3.0]})  # no XID in this block: xid all NaN
    assert ev("xid in (48, 79)", blk) == [0.0, 0.0, 0.0]
    assert ev("power.draw in (2, 3)", blk) == [0.0, 1.0, 1.0]
