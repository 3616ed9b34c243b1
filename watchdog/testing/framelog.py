"""A recording's frame as a log the injector writes faults into, without a copy on disk.

:class:`~watchdog.testing.rawlog.RawLog` writes faults into a CSV's own text cells;
:class:`FrameLog` holds the values of a :class:`~watchdog.sources.replay.frame.Recording`
(what the replay readers made of a log: a W&B run file or its derived wide table, an
``nvidia-smi`` CSV, a recording) with the same interface, so every fault of
:mod:`.inject` and :mod:`.model_faults` writes into it unchanged. A W&B run's values are
the means W&B's monitor took over each sampling period, already floats: a written value
is a float too. :meth:`recording` gives the faulted copy as a recording for
:func:`watchdog.pipeline.replay.replay_recording`; the source file is only read.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from watchdog.testing.rawlog import LogReadings
from watchdog.untyped import Array

if TYPE_CHECKING:
    from watchdog.sources.replay.frame import Recording

BASE = ("ts", "uuid", "index", "lost")


class FrameLog(LogReadings):
    """The rows of a recording's frame: ``ts``, ``gpu`` (the GPU index), and each metric
    column as a float array (a role is a catalogue metric name)."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        f = rec.frame
        self.ts = f["ts"].to_numpy(dtype=np.float64, copy=True)
        self.gpu = f["index"].to_numpy(dtype=np.int64, copy=True)
        self._uuid = f["uuid"].to_numpy(dtype=object, copy=True)
        self._lost = f["lost"].to_numpy(dtype=bool, copy=True)
        self._cols = {c: f[c].to_numpy(dtype=np.float64, copy=True)
                      for c in f.columns if c not in BASE}
        self.roles = list(self._cols)

    def has(self, role: str) -> bool:
        return role in self._cols

    def values(self, role: str) -> Array:
        """A column (a copy; NaN where missing); an absent column is all NaN."""
        col = self._cols.get(role)
        return np.full(len(self.ts), math.nan) if col is None else col.copy()

    def set(self, role: str, rows: Array, vals: Array) -> None:
        """Write ``vals`` into column ``role`` at ``rows`` (NaN: left as it was); a column
        the log does not have stays absent."""
        col = self._cols.get(role)
        if col is None or not len(rows):
            return
        vals = np.asarray(vals, dtype=np.float64)
        ok = ~np.isnan(vals)
        col[np.asarray(rows)[ok]] = vals[ok]

    def set_text(self, role: str, rows: Array, text: str) -> None:
        """A text cell (an ``nvidia-smi`` reason column): a frame has none."""

    def insert(self, onset: float, duration: float) -> float:
        """As :meth:`RawLog.insert <watchdog.testing.rawlog.RawLog.insert>`: the stretch
        before ``onset`` goes on for ``duration`` s; later rows move on (returned, s)."""
        order, times, shift = self.inserted(onset, duration)
        self.ts = times
        self.gpu = self.gpu[order]
        self._uuid = self._uuid[order]
        self._lost = self._lost[order]
        self._cols = {c: v[order] for c, v in self._cols.items()}
        return shift

    def recording(self) -> Recording:
        """The faulted copy: the recording with this frame (rows in time and GPU order);
        its console lines after an insertion keep their times."""
        order = np.lexsort((self.gpu, self.ts))
        frame = pd.DataFrame({"ts": self.ts[order], "uuid": self._uuid[order].astype(str),
                              "index": self.gpu[order], "lost": self._lost[order],
                              **{c: v[order] for c, v in self._cols.items()}})
        return dataclasses.replace(self.rec, frame=frame, absent={}, errors={},
                                   processes={}, sample_xids={}, xids=[])
