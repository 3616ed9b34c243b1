"""The detector's intake: frames and live samples in, one :class:`Block` per batch of ticks out.

Input arrives as a replay frame (many ticks) or as live samples (one tick each); both
become plain columns (:func:`frame_columns`, :func:`tick_columns`), then go through
:meth:`Intake.rows` and :meth:`Intake.block`:

* rows earlier than an earlier row (time going backwards), at a tick already processed,
  or repeated or backwards for their own GPU are dropped and counted
  (``dropped_samples``, reported in the evidence of later incidents);
* the rows of a frame's last timestamp are held back until later input arrives (another
  GPU's row for that time may still come), unless the frame is complete;
* the rest is cut at tick boundaries into blocks of at most :data:`MAX_BLOCK_ROWS` rows;
* a GPU that stopped reporting while the others go on gets synthetic lost rows
  (:mod:`presence`);
* every GPU keeps one slot (append-only, by first appearance or the inventory) and its
  latest time; a sample's weight is the time since its GPU's previous sample (s, capped
  at ``max_gap``);
* XID events go to their GPU's first sample at or after them.

Only the data's times count, never the clock, so any split of the input gives the same
blocks' contents tick by tick (block == tick).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import watchdog.detect.rows as blockrows
from watchdog import catalogue
from watchdog.detect.learned import PowerLevels
from watchdog.detect.presence import vanish_times
from watchdog.detect.signals import Block
from watchdog.records import DeviceInfo, Sample, XidEvent
from watchdog.untyped import Array

if TYPE_CHECKING:
    import pandas as pd

# Rows processed at once: bounds the node grid (ticks × GPUs) when every GPU has its own
# timestamps. Splitting never changes results (block == tick).
MAX_BLOCK_ROWS = 131_072

Columns = dict[str, Array]  # "ts" (s), "uuid", "index", "lost", catalogue metrics


@dataclass
class Gpu:
    """One GPU the detector knows: its inventory, its slot in every block's arrays
    (append-only) and the time of its latest accepted sample (s, NaN before the first)."""

    index: int
    uuid: str
    device: DeviceInfo
    slot: int
    last_ts: float = math.nan


def frame_columns(frame: pd.DataFrame) -> Columns:
    """A replay frame's columns as arrays (``lost`` False where the frame has none)."""
    cols: Columns = {
        "ts": frame["ts"].to_numpy(dtype=np.float64),
        "uuid": frame["uuid"].to_numpy(dtype=object),
        "index": frame["index"].to_numpy(dtype=np.int64),
        "lost": (frame["lost"].to_numpy(dtype=bool) if "lost" in frame.columns
                 else np.zeros(len(frame), bool)),
    }
    for c in frame.columns:
        if c in catalogue.BY_NAME:
            cols[c] = frame[c].to_numpy(dtype=np.float64)
    return cols


def tick_columns(samples: Sequence[Sample]) -> Columns:
    """Live samples as columns (a metric a sample lacks is NaN there)."""
    cols: Columns = {
        "ts": np.array([s.ts for s in samples], dtype=np.float64),
        "uuid": np.array([s.uuid for s in samples], dtype=object),
        "index": np.array([s.index for s in samples], dtype=np.int64),
        "lost": np.array([s.lost for s in samples], dtype=bool),
    }
    seen: set[str] = set()
    for s in samples:
        seen.update(s.values)
    names = sorted(k for k in seen if k in catalogue.BY_NAME)
    if names:  # one 2-D conversion (None -> NaN), not one list per metric
        grid = np.array([list(map(s.values.get, names)) for s in samples],
                        dtype=np.float64).T.copy()
        cols.update(zip(names, grid, strict=True))
    return cols


class Intake:
    """Rows in, blocks out, with what is carried between them: the known GPUs, the held
    rows of an unfinished tick, the XID events not yet placed, the latest tick."""

    def __init__(self, devices: Sequence[DeviceInfo], max_gap: float,
                 metrics: frozenset[str] | None, levels: PowerLevels) -> None:
        """``max_gap`` (s): see ``DetectorConfig``. ``metrics``: the only catalogue
        metrics that may come (None: any). ``levels``: the learned levels every block
        advances."""
        self.max_gap = max_gap
        self.metrics = metrics
        self.levels = levels
        self.gpus: dict[str, Gpu] = {}  # by UUID, in (index, UUID) order
        self.slots: list[Gpu] = []  # by slot
        self.dropped_samples = 0
        self._held: Columns | None = None
        self._xids: list[XidEvent] = []
        self._last_tick = -math.inf
        for d in devices:
            self._add_gpu(d.uuid, d.index, d)

    def add_xids(self, xids: Iterable[XidEvent]) -> None:
        """XID events to place on the samples of the next blocks."""
        self._xids.extend(xids)

    def check_xids_announced(self) -> None:
        """XID events are coming: an error unless ``metrics`` allow them (a rule pruned
        for the lack of ``"xid"`` might have fired on them)."""
        if self.metrics is not None and "xid" not in self.metrics:
            raise ValueError("XID events were not announced (metrics without 'xid')")

    def rows(self, cols: Columns, hold: bool) -> Iterator[Columns]:
        """The accepted rows of ``cols`` (and of the rows held before), in blocks cut at
        ticks; with ``hold`` the rows of the last timestamp are kept for later input."""
        if self.metrics is not None:
            extra = [k for k in cols if k in catalogue.BY_NAME and k not in self.metrics]
            if extra:  # a pruned rule might have fired on it
                raise ValueError(f"metric {extra[0]!r} was not among the announced ones")
        ts = cols["ts"]
        # rows earlier than an earlier row (time going backwards) or at a tick already
        # processed are dropped
        base = self._last_tick
        held_ts = self._held["ts"][0] if self._held is not None else -math.inf
        prev = np.maximum.accumulate(np.concatenate(([max(base, held_ts)], ts)))[:-1]
        ok = (ts >= prev) & (ts > base) & ~np.isnan(ts)
        if not ok.all():
            self.dropped_samples += int((~ok).sum())
            cols = {k: v[ok] for k, v in cols.items()}
            ts = cols["ts"]
        if not len(ts):
            return
        if self._held is not None:  # the held tick is complete or continues: process it
            cols = blockrows.concat(self._held, cols)  # with these rows, as one block
            self._held = None
            ts = cols["ts"]
        if hold:
            cut = int(np.searchsorted(ts, ts[-1], side="left"))
            self._held = {k: v[cut:] for k, v in cols.items()}
            cols = {k: v[:cut] for k, v in cols.items()}
        ts = cols["ts"]
        start = 0
        while start < len(ts):  # bounded blocks (memory of the node grid), cut at ticks
            end = min(start + MAX_BLOCK_ROWS, len(ts))
            if end < len(ts):
                end = max(int(np.searchsorted(ts, ts[end], side="left")), start + 1)
                end = int(np.searchsorted(ts, ts[end - 1], side="right"))
            yield {k: v[start:end] for k, v in cols.items()}
            start = end

    def take_held(self) -> Columns | None:
        """The held rows (end of input: their tick is complete), or None."""
        held, self._held = self._held, None
        return held

    def block(self, cols: Columns) -> Block | None:
        """One block of accepted rows as a :class:`Block` (None when no GPU has a new
        sample in it); advances every GPU's latest time and places the XID events."""
        self._last_tick = max(self._last_tick, float(cols["ts"][-1]))
        codes, uniq = blockrows.factorize(cols["uuid"], cols["ts"])
        order = blockrows.by_gpu(codes, len(uniq))
        bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
        extra = self._vanished(cols, uniq, order, bounds)
        if extra is not None:
            cols = blockrows.concat(cols, extra)
            by_ts = np.argsort(cols["ts"], kind="stable")
            cols = {k: v[by_ts] for k, v in cols.items()}
            codes, uniq = blockrows.codes_by_first(cols["uuid"])
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(uniq) + 1))
        metric_names = [k for k in cols if k in catalogue.BY_NAME]
        per_slot: dict[int, Columns] = {}
        for ci, uuid in enumerate(uniq):
            rows = order[bounds[ci]:bounds[ci + 1]]
            g = self.gpus.get(uuid) or self._add_gpu(uuid, int(cols["index"][rows[0]]))
            part = self._gpu_rows(g, rows, cols)
            if part is not None:
                per_slot[g.slot] = part
        if not per_slot:
            return None
        return self._block(per_slot, metric_names, cols)

    def _add_gpu(self, uuid: str, index: int, device: DeviceInfo | None = None) -> Gpu:
        g = Gpu(index, uuid, device or DeviceInfo(index=index, uuid=uuid), len(self.slots))
        self.slots.append(g)
        self.gpus[uuid] = g
        self.gpus = dict(sorted(self.gpus.items(), key=lambda kv: (kv[1].index, kv[0])))
        return g

    def _block(self, per_slot: dict[int, Columns], metric_names: list[str],
               cols: Columns) -> Block:
        """The GPUs' accepted samples slot by slot as one :class:`Block` (one gather per
        metric; every metric is missing at a lost sample)."""
        n_slots = len(self.slots)
        counts = np.array([len(per_slot[i]["ts"]) if i in per_slot else 0
                           for i in range(n_slots)], dtype=np.int64)
        parts = [per_slot[i] for i in range(n_slots) if i in per_slot]

        def cat(name: str) -> Array:
            return np.concatenate([p[name] for p in parts])

        rows, lost = cat("rows"), cat("lost")
        any_lost = bool(lost.any())
        metrics = {m: np.where(lost, np.nan, cols[m][rows]) if any_lost else cols[m][rows]
                   for m in metric_names}
        return Block(cat("ts"), cat("d"), counts, [g.device for g in self.slots], metrics,
                     lost, cat("xid"), cat("xid_count"), self.levels)

    def _vanished(self, cols: Columns, uniq: Array, order: Array,
                  bounds: Array) -> Columns | None:
        """Synthetic lost rows for GPUs that stopped reporting (see :mod:`presence`)."""
        ticks = blockrows.unique(cols["ts"])
        where = {u: i for i, u in enumerate(uniq)}
        ts_out: list[float] = []
        who: list[Gpu] = []
        for uuid, g in self.gpus.items():
            ci = where.get(uuid)
            mine = (np.empty(0) if ci is None
                    else blockrows.unique(cols["ts"][order[bounds[ci]:bounds[ci + 1]]]))
            for t in vanish_times(g.last_ts, mine, ticks, self.max_gap):
                ts_out.append(t)
                who.append(g)
        if not ts_out:
            return None
        n = len(ts_out)
        return {"ts": np.array(ts_out), "uuid": np.array([g.uuid for g in who], dtype=object),
                "index": np.array([g.index for g in who], dtype=np.int64),
                "lost": np.ones(n, bool)}

    def _gpu_rows(self, g: Gpu, rows: Array, cols: Columns) -> Columns | None:
        """One GPU's accepted rows of the block (repeated/backwards ones dropped): their
        row numbers, times, weights, lost flags and XIDs."""
        ts = cols["ts"][rows]
        prev = np.fmax.accumulate(np.concatenate(([g.last_ts], ts)))
        keep = ~(ts <= prev[:-1])  # repeated or backwards for this GPU: dropped
        if not keep.all():
            self.dropped_samples += int((~keep).sum())
            rows, ts = rows[keep], ts[keep]
        if not len(ts):
            return None
        prev_ts = np.concatenate(([g.last_ts], ts[:-1]))
        d = np.where(np.isnan(prev_ts), 0.0, np.minimum(ts - prev_ts, self.max_gap))
        g.last_ts = float(ts[-1])
        out = {"ts": ts, "d": d, "lost": cols["lost"][rows], "rows": rows}
        out["xid"], out["xid_count"] = self._assign_xids(g.uuid, ts)
        return out

    def _assign_xids(self, uuid: str, ts: Array) -> tuple[Array, Array]:
        """XID events go to the GPU's first sample at or after them; later ones wait."""
        xid = np.full(len(ts), np.nan)
        cnt = np.zeros(len(ts))
        if not self._xids:
            return xid, cnt
        rest: list[XidEvent] = []
        for ev in self._xids:
            if ev.uuid != uuid:
                rest.append(ev)
                continue
            i = int(np.searchsorted(ts, ev.ts, side="left"))
            if i >= len(ts):
                rest.append(ev)
                continue
            cnt[i] += 1
            xid[i] = ev.code if np.isnan(xid[i]) else max(xid[i], ev.code)
        self._xids = rest
        return xid, cnt
