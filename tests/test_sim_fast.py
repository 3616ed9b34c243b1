"""The healthy node a block at a time (``watchdog.sources.sim.fast``) gives exactly the
readings of the scalar path, through start-up, every kind of checkpoint, power-cap and
sync-boost bits, chunk boundaries and a hand-over to the scalar path."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from watchdog import catalogue
from watchdog.sources.sim import SimSource, fast
from watchdog.sources.sim import frames as RP


def _node(spec: str = "sim:healthy", **kw: object) -> SimSource:
    return SimSource.from_spec(spec, gpus=8, start=RP.SIM_START, **kw)  # type: ignore[arg-type]


def _frame(chunks: object) -> pd.DataFrame:
    return pd.concat([f for f, _ in chunks], ignore_index=True)  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "seed"), [("h100-sxm", 2), ("a100-pcie", 3)])
def test_block_readings_equal_the_scalar_path(model: str, seed: int) -> None:
    duration = 2 * 3600.0
    src = _node(model=model, seed=seed)
    variants = {v for _, _, v in src.legit_waits(duration)}
    assert variants == {"checkpoint_rank0_writes", "checkpoint_remote_writer",
                        "checkpoint_all_pause"}  # every trap of the job is in the span
    want = _frame(RP._scalar_chunks(_node(model=model, seed=seed), duration, 1.0, 1000))
    got = _frame(RP._chunks(src, duration, 1.0, 1000))  # 1000: blocks cross the phases
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    reasons = want["clocks_event_reasons.active"].astype(int)
    assert (reasons & 0x4).any() and (reasons & 0x10).any() and (reasons & 0x1).any()
    assert src.node.k == int(duration)  # the node's slow state followed the blocks


def test_a_block_that_would_reach_the_thermal_controller_goes_back_to_the_scalar_path(
) -> None:
    """GPU 3 with its ambient raised until the controller engages under load: the fast
    path stops at the first block that gets there, and the node, synchronised to that
    block's first tick, carries on reading by reading: the same frame throughout."""
    def hot(src: SimSource) -> SimSource:
        src.job.ambient_c[3] += 20.0  # engages after about 15 min
        return src

    duration = 1800.0
    want = _frame(RP._scalar_chunks(hot(_node(seed=4)), duration, 1.0, 256))
    assert (want.loc[want["index"] == 3, "clocks_event_reasons.active"].astype(int)
            & 0x20).any()  # SW thermal slowdown: the controller did engage
    src = hot(_node(seed=4))
    handed: list[float] = []

    def scalar(rest: float) -> object:
        handed.append(rest)
        return RP._scalar_chunks(src, rest, 1.0, 256)

    got = _frame(fast.chunks(src, duration, 256, list(catalogue.NAMES), scalar))
    assert handed and 0 < handed[0] < duration
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_only_a_faultless_node_read_every_second_takes_the_block_path() -> None:
    assert fast.supports(_node(), 1.0)
    assert not fast.supports(_node("sim:comm_hang"), 1.0)
    assert not fast.supports(_node(), 2.0)
    read = _node()
    read.sample(RP.SIM_START)
    assert not fast.supports(read, 1.0)  # already read: its own clock goes on


def test_rounding_follows_python_at_near_ties() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array([0.125, 0.285, 2.675, 1.005, 0.015, 700.005, 391.125]),
                        np.round(rng.uniform(0, 700, 2000), 3),
                        rng.uniform(0, 700, 2000)])
    for nd in (2, 3):
        assert fast.py_round(x, nd).tolist() == [round(float(v), nd) for v in x]
