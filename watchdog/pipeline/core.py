"""The one place samples become incidents: every command builds its detector here, and
feeds it through one of three drivers.

``run``, ``replay``, ``check``, ``train`` and the rule tests use the same rules, the same
:class:`~watchdog.detect.Detector` and the same evaluation; they differ only in how the
samples arrive:

* **live** (``watchdog run``): one reading of every GPU per tick
  (:class:`~watchdog.pipeline.live.LivePipeline` calls ``feed_tick``); healthy ticks are
  evaluated :data:`~watchdog.detect.engine.LIVE_TICK_BATCH_S` at a time, urgent ones at
  once.
* **block** (``watchdog replay``, ``train``, the rule tests): a recording's frame in blocks
  of whole ticks (:func:`feed_blocks`), with exactly the incremental semantics of live.
* **burst** (``watchdog check``): a second of readings (:func:`feed_burst`); nothing is
  learned from so little history (idle and busy power fall back to the limit).

A mode is only how the detector is configured for its driver; what a rule means never
depends on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from watchdog.detect import Detector, Rule
from watchdog.detect.engine import LIVE_TICK_BATCH_S, DetectorConfig
from watchdog.incident import Incident
from watchdog.records import DeviceInfo, Sample, XidEvent

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.pipeline.ports import Progress

Mode = Literal["live", "block", "burst"]
SPARSE_GAP_SAMPLES = 2.5  # max_gap of a log sampled every interval s: 2.5 intervals


def build_detector(rules: Sequence[Rule], *, host: str, devices: Sequence[DeviceInfo], mode: Mode,
                   metrics: Iterable[str] | None = None,
                   interval: float | None = None) -> Detector:
    """The detector for ``mode``'s driver. ``metrics``: the only metrics a recording will
    ever feed (rules that cannot fire without others are left out); None live.
    ``interval`` (s): a recording's sampling interval (windows too short for it widen)."""
    if mode not in ("live", "block", "burst"):
        raise ValueError(f"unknown detector mode {mode!r}")
    config = DetectorConfig(learn_power_levels=mode != "burst", interval=interval)
    if interval is not None and SPARSE_GAP_SAMPLES * interval > config.max_gap:
        # a sparse log: a GPU is missing (lost, or absent from node rules) only once it
        # skipped a sample, not between two of its regular ones
        config = DetectorConfig(max_gap=SPARSE_GAP_SAMPLES * interval,
                                learn_power_levels=config.learn_power_levels,
                                interval=interval)
    batch = LIVE_TICK_BATCH_S if mode == "live" else 0.0
    return Detector(rules, host, devices, config, metrics=metrics, tick_batch_s=batch)


def feed_blocks(det: Detector, frame: pd.DataFrame, xids: list[XidEvent], *,
                block_rows: int, progress: Progress | None = None,
                ends_tick: bool = True) -> None:
    """Feed ``frame`` to ``det`` in blocks of about ``block_rows`` rows cut at ticks.

    Blocks end on tick boundaries and each block carries the XID events up to the next
    block's first timestamp, so no tick and no event is split or lost. ``ends_tick``: no
    later row has the frame's last time; otherwise that tick may go on in the next frame
    (a log read in parts) and the detector holds its rows until then. XID events after
    the last row are fed only when it ends on a tick. ``progress.update(rows)`` is called
    after each block.
    """
    import numpy as np

    if block_rows < 1:
        raise ValueError("block_rows must be positive")
    ts = frame["ts"].to_numpy()
    n, i, k = len(frame), 0, 0
    while i < n:
        j = min(n, i + block_rows)
        if j < n:  # end the block on a tick boundary
            j = int(np.searchsorted(ts, ts[j], side="left"))
            if j <= i:
                j = int(np.searchsorted(ts, ts[i], side="right"))
        t_next = float(ts[j]) if j < n else float("inf")
        k2 = k
        while k2 < len(xids) and xids[k2].ts < t_next:
            k2 += 1
        det.feed_frame(frame.iloc[i:j], xids[k:k2], complete=j < n or ends_tick)
        det.drain()  # transitions are for live notification; replay reports incidents
        if progress is not None:
            progress.update(j - i)
        i, k = j, k2
    if ends_tick and k < len(xids):  # events after the last sample (or no samples at all)
        det.feed_frame(frame.iloc[n:n], xids[k:])


def feed_burst(det: Detector, ticks: Iterable[tuple[float, Sequence[Sample]]]
               ) -> list[Incident]:
    """A probe's burst, tick by tick (oldest first); returns every incident at its end."""
    for ts, samples in ticks:
        det.feed_tick(ts, samples)
    return det.finish()
