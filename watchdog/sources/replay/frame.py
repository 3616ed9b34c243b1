"""The columnar form of a recorded trace (:class:`Recording`) and its helpers.

Every reader ends by calling :func:`build` with numpy columns; :func:`build` sorts by time,
fixes the dtypes of the frame contract (see the package docstring) and wraps it in a
:class:`Recording`, which also offers the per-sample view (``ticks()``) that the
tick-by-tick detector and ``watchdog record`` use.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from watchdog.records import DeviceInfo, ProcessInfo, Sample, XidEvent
from watchdog.untyped import Array

BASE_COLUMNS = ("ts", "uuid", "index", "lost")

Key = tuple[float, str]  # (ts, uuid): how sparse per-sample data is attached


@dataclass
class Recording:
    """A whole recorded trace: satisfies ``watchdog.sources.base.RecordedSource``.

    ``frame``: one row per (time, GPU), sorted by ``ts`` then ``index``; columns ``ts``
    (float64 POSIX s UTC), ``uuid`` (str), ``index`` (int64), ``lost`` (bool), then one
    float64 column per metric present (NaN = missing). ``xids``: XID events in time order.
    ``processes``/``errors``: sparse per-sample data keyed by ``(ts, uuid)``; a key absent
    from ``processes`` means "processes not read" (``Sample.processes is None``).
    ``absent``: per metric, a bool row mask where the sample had no such key at all (only
    the own format knows the difference from None; empty for logs).
    ``warnings``: one line each, for things dropped or repaired while reading.
    ``sample_xids``: the XIDs each sample carried, by ``(ts, uuid)`` of the sample (an
    XID's own ``ts`` may differ); when empty, XIDs attach to the sample at their own time.
    """

    path: str
    host: str
    format: str
    frame: pd.DataFrame
    inventory: list[DeviceInfo]
    xids: list[XidEvent] = field(default_factory=list)
    processes: dict[Key, tuple[ProcessInfo, ...]] = field(default_factory=dict)
    errors: dict[Key, tuple[str, ...]] = field(default_factory=dict)
    absent: dict[str, Array] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sample_xids: dict[Key, tuple[XidEvent, ...]] = field(default_factory=dict)

    def devices(self) -> list[DeviceInfo]:
        """Inventory of the GPUs seen in the trace, by index."""
        return list(self.inventory)

    @property
    def metrics(self) -> list[str]:
        """Names of the metric columns of ``frame``, in column order."""
        return [c for c in self.frame.columns if c not in BASE_COLUMNS]

    def ticks(self) -> Iterator[tuple[float, list[Sample]]]:
        """Samples grouped by timestamp, in time order (one Python object per sample).

        For block processing use ``frame``; this view exists for the tick-by-tick path.
        """
        f = self.frame
        n = len(f)
        if n == 0:
            return
        ts = f["ts"].to_numpy()
        uuids = f["uuid"].to_numpy(dtype=object)
        idx = f["index"].to_numpy()
        lost = f["lost"].to_numpy()
        names = self.metrics
        cols = [f[m].to_numpy() for m in names]
        absent = [self.absent.get(m) for m in names]
        xids_by_key: dict[Key, tuple[XidEvent, ...]] = dict(self.sample_xids)
        if not xids_by_key:
            for x in self.xids:
                k = (x.ts, x.uuid)
                xids_by_key[k] = (*xids_by_key.get(k, ()), x)
        bounds = np.flatnonzero(np.diff(ts)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [n]))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            t = float(ts[a])
            out = []
            for r in range(a, b):
                u = str(uuids[r])
                key = (t, u)
                values: dict[str, float | None] = {}
                for name, col, ab in zip(names, cols, absent, strict=True):
                    if ab is not None and ab[r]:
                        continue
                    v = float(col[r])
                    values[name] = None if math.isnan(v) else v
                out.append(Sample(ts=t, uuid=u, index=int(idx[r]), values=values,
                                  processes=self.processes.get(key),
                                  xids=tuple(xids_by_key.get(key, ())), lost=bool(lost[r]),
                                  errors=self.errors.get(key, ())))
            yield t, out

    def span(self) -> tuple[float, float] | None:
        """(first, last) timestamp in POSIX s, or None for an empty trace."""
        if len(self.frame) == 0:
            return None
        ts = self.frame["ts"]
        return float(ts.iloc[0]), float(ts.iloc[-1])


class OutOfOrder(Exception):
    """A part of a log that cannot be used as it is (see :mod:`.parts`)."""


def standin_uuid(host: str, index: int) -> str:
    """The stable stand-in identity of a GPU whose log has no UUID column."""
    return f"{host}/gpu{index}"


SNAP_S = 0.25  # most between consecutive rows of one nvidia-smi query (s)


def snap_ticks(ts: Array, index: Array) -> Array:
    """One time per tick: the rows of one ``nvidia-smi`` query carry the time each GPU was
    read, 1-22 ms apart, but they are one reading of the node. Consecutive rows (in file
    order) with rising GPU index and at most :data:`SNAP_S` apart take the time of the
    tick's first row, so the detector sees whole ticks (node rules compare GPUs of one
    tick; a tick per row would also cost a block evaluation per row). Rows already
    sharing a time, or out of order, are left as they are."""
    n = len(ts)
    if n < 2:
        return ts
    d = np.diff(ts)
    same_tick = (d > 0) & (d <= SNAP_S) & (np.diff(index) > 0)
    if not same_tick.any():
        return ts
    starts = np.flatnonzero(np.concatenate(([True], ~same_tick)))
    tick = np.cumsum(np.concatenate(([True], ~same_tick))) - 1
    return ts[starts][tick]


def build(*, path: str, host: str, fmt: str, ts: Array, uuid: Array,
          index: Array, lost: Array | None, metrics: dict[str, Array],
          inventory: dict[str, dict[str, object]] | None = None,
          row_errors: dict[int, list[str]] | None = None,
          warnings: list[str] | None = None,
          first_rows: Array | None = None, in_order: bool = False) -> Recording:
    """Assemble a :class:`Recording` from unsorted numpy columns (one entry per row).

    ``inventory`` maps uuid -> DeviceInfo fields seen in the log (name, pci_bus_id...).
    ``row_errors`` maps an input row number to its read-error texts. ``first_rows`` (input
    rows, in row order) where each distinct uuid first appears, when the reader knows them
    cheaply (it saves hashing every row's uuid). With ``in_order`` rows that need sorting
    raise :class:`OutOfOrder` instead (a part of a log read in parts: only the whole log
    can be sorted).
    """
    n = len(ts)
    index = np.asarray(index, dtype=np.int64)
    ts = snap_ticks(np.asarray(ts, dtype=np.float64), index)
    dts = np.diff(ts)
    is_sorted = bool(np.all((dts > 0) | ((dts == 0) & (np.diff(index) > 0))))
    if in_order and not is_sorted:
        raise OutOfOrder("rows are not in (time, index) order")
    order = None if is_sorted else np.lexsort((index, ts))
    data: dict[str, object] = {}

    def take(a: Array) -> Array:
        return a if order is None else a[order]

    data["ts"] = take(np.asarray(ts, dtype=np.float64))
    data["uuid"] = take(np.asarray(uuid, dtype=object))
    data["index"] = take(np.asarray(index, dtype=np.int64))
    data["lost"] = take(np.zeros(n, dtype=bool) if lost is None else np.asarray(lost, bool))
    for name, col in metrics.items():
        data[name] = take(np.asarray(col, dtype=np.float64))
    frame = pd.DataFrame(data, copy=False)
    frame["uuid"] = frame["uuid"].astype(str)
    errors: dict[Key, tuple[str, ...]] = {}
    for row, texts in (row_errors or {}).items():
        errors[(float(ts[row]), str(uuid[row]))] = tuple(texts)
    # first rows are known only while the rows keep their order (the usual case)
    devs = _inventory(frame, inventory or {}, first_rows if order is None else None)
    return Recording(path=path, host=host, format=fmt, frame=frame, inventory=devs,
                     errors=errors, warnings=list(warnings or []))


def _inventory(frame: pd.DataFrame, extra: dict[str, dict[str, object]],
               first_rows: Array | None = None) -> list[DeviceInfo]:
    """One DeviceInfo per uuid (first index it was seen with), filled from the log."""
    if len(frame) == 0:
        return []
    if first_rows is not None:
        firsts = frame.iloc[first_rows][["uuid", "index"]]
    else:
        firsts = frame.drop_duplicates("uuid")[["uuid", "index"]]
    mem_total: dict[str, float] = {}
    if "memory.total" in frame.columns:  # first non-missing value per GPU
        at_first = frame.loc[firsts.index, "memory.total"]
        if at_first.isna().any():
            mem_total = frame.groupby("uuid", sort=False)["memory.total"].first().dropna()\
                .to_dict()
        else:
            mem_total = dict(zip(firsts["uuid"], at_first, strict=True))
    out = []
    for u, i in zip(firsts["uuid"].tolist(), firsts["index"].tolist(), strict=True):
        fields = dict(extra.get(u, {}))
        if "memory_total_mib" not in fields and u in mem_total:
            fields["memory_total_mib"] = float(mem_total[u])
        out.append(DeviceInfo(index=int(i), uuid=u, **fields))  # type: ignore[arg-type]
    out.sort(key=lambda d: d.index)
    return out
