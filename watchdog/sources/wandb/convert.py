"""W&B system-metric keys -> the metric catalogue, and the samples -> a Recording.

Both W&B inputs, the run file (:mod:`.runfile`) and a wide table (:mod:`.table`), reduce to
the same :class:`Samples`: one entry per stats record (time, and the values of its
``gpu.<i>.<key>`` items); :func:`recording` turns those into the replay frame, so the two
give the same frame for the same records.

Keys (W&B's system monitor; older versions write fewer, newer ones may append
``/l:<label>``, which is dropped):

==========================  ==============================================================
``gpu.<i>.gpu``             ``utilization.gpu`` (%)
``gpu.<i>.memory``          ``utilization.memory`` (%: the memory controller's busy time)
``gpu.<i>.temp``            ``temperature.gpu`` (C)
``gpu.<i>.powerWatts``      ``power.draw`` (W)
``.enforcedPowerLimitWatts``  ``enforced.power.limit`` (W); without it (older versions),
                            ``powerWatts / powerPercent * 100`` where both are > 0
``gpu.<i>.smClock``         ``clocks.sm``; ``.memoryClock`` ``clocks.mem``;
                            ``.graphicsClock`` ``clocks.gr`` (MHz)
``.memoryAllocatedBytes``   ``memory.used`` (MiB); ``memory.total`` = bytes / percent,
                            per GPU (the median over rows with percent >= 1), else the
                            metadata's memory size; with percent only, used = percent x
                            total
``.correctedMemoryErrors``  ``ecc.errors.corrected.volatile.total``;
``.uncorrectedMemoryErrors``  ``ecc.errors.uncorrected.volatile.total``
``gpu.<i>.fanSpeed``        ``fan.speed`` (%); ``.pcieLinkGen`` ``pcie.link.gen.current``
==========================  ==============================================================

A key W&B did not write is NaN in the frame, never 0. ``gpu.process.<i>.*`` (the same
GPU seen from the W&B process's own device) and keys of other systems are not read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from watchdog.errors import InputError
from watchdog.untyped import Array

#: Highest GPU index read (0-1023); a key naming a higher one is counted and dropped.
MAX_GPUS = 1024
#: Most stats records (rows of a table) read from one run: 30 days at 1 s.
MAX_RECORDS = 2_592_000
#: Most rows of the frame (records x GPUs): the replay frame's memory stays near 2 GB.
MAX_ROWS = 20_000_000
#: Records closer than this (s) whose GPU keys do not repeat are one reading of the node
#: (W&B's newer monitor writes each device group as its own record, microseconds apart).
MERGE_S = 1.0

KEY = re.compile(r"^(?:system\.)?gpu\.(\d{1,9})\.([A-Za-z][A-Za-z0-9_]*)(?:/l:.*)?$")

DIRECT: dict[str, str] = {
    "gpu": "utilization.gpu",
    "memory": "utilization.memory",
    "temp": "temperature.gpu",
    "powerWatts": "power.draw",
    "enforcedPowerLimitWatts": "enforced.power.limit",
    "smClock": "clocks.sm",
    "memoryClock": "clocks.mem",
    "graphicsClock": "clocks.gr",
    "correctedMemoryErrors": "ecc.errors.corrected.volatile.total",
    "uncorrectedMemoryErrors": "ecc.errors.uncorrected.volatile.total",
    "fanSpeed": "fan.speed",
    "pcieLinkGen": "pcie.link.gen.current",
}
#: Keys read to derive a catalogue metric (not columns of their own).
DERIVED = frozenset({"powerPercent", "memoryAllocated", "memoryAllocatedBytes"})
KNOWN = frozenset(DIRECT) | DERIVED


def parse_key(key: str) -> tuple[int, str] | None:
    """``(gpu index, key)`` of a ``gpu.<i>.<key>[/l:<label>]`` name (optionally prefixed
    ``system.``, as W&B's API exports it), or None for every other key."""
    got = _PARSED.get(key, _UNSEEN)
    if got is _UNSEEN:
        m = KEY.match(key)
        got = None if m is None else (int(m.group(1)), m.group(2))
        if len(_PARSED) < 100_000:  # a run's keys repeat every record; a forged file's
            _PARSED[key] = got      # endless new keys are parsed, not remembered
    return got  # type: ignore[return-value]


_UNSEEN = object()
_PARSED: dict[str, object] = {}


@dataclass
class Samples:
    """What a W&B input held: per stats record its time and GPU values.

    ``values[(gpu, key)]`` is a list of ``(record number, value)``; ``ts[k]`` is record
    ``k``'s time (POSIX s). ``high_gpu``: items dropped for a GPU index over
    :data:`MAX_GPUS`; ``bad_values``: values that were not numbers.
    """

    path: str
    ts: list[float] = field(default_factory=list)
    values: dict[tuple[int, str], list[tuple[int, float]]] = field(default_factory=dict)
    high_gpu: int = 0
    bad_values: int = 0
    notes: list[str] = field(default_factory=list)  # other lines about dropped data

    def add(self, ts: float, items: list[tuple[str, str | float]]) -> None:
        """One stats record: its time and ``(key, value)`` items (JSON text or a float).
        Items that are not ``gpu.<i>.<known key>`` are skipped; a record with none of
        them is not kept."""
        row = len(self.ts)
        kept = False
        for key, raw in items:
            got = parse_key(key)
            if got is None or got[1] not in KNOWN:
                continue
            if got[0] >= MAX_GPUS:
                self.high_gpu += 1
                continue
            v = _number(raw)
            if v is None:
                self.bad_values += 1
                continue
            self.values.setdefault(got, []).append((row, v))
            kept = True
        if kept:
            if row >= MAX_RECORDS:
                raise InputError(f"{self.path}: more than {MAX_RECORDS} system-metric "
                                 "records (30 days at 1 s): not replayed")
            self.ts.append(ts)

    def warnings(self) -> list[str]:
        """One line for each kind of data dropped."""
        out = list(self.notes)
        if self.high_gpu:
            out.append(f"{self.path}: {self.high_gpu} value(s) for a GPU index over "
                       f"{MAX_GPUS - 1} dropped")
        if self.bad_values:
            out.append(f"{self.path}: {self.bad_values} value(s) that are not numbers "
                       "dropped")
        return out


def _number(raw: str | float | bytes) -> float | None:
    """A finite float from a JSON number's text (or a float); None otherwise."""
    if isinstance(raw, float):
        v = raw
    else:
        try:
            v = float(raw)
        except (TypeError, ValueError):
            return None
    return v if math.isfinite(v) else None


def _ticks(ts: Array, keys_of: list[set[tuple[int, str]]]) -> Array:
    """The tick number of every record: consecutive records within :data:`MERGE_S` of
    their tick's first record, none repeating a key of the tick, share a tick."""
    tick = np.zeros(len(ts), dtype=np.int64)
    k = -1
    first = -math.inf
    seen: set[tuple[int, str]] = set()
    for r in range(len(ts)):
        if ts[r] - first > MERGE_S or ts[r] < first or seen & keys_of[r]:
            k += 1
            first = float(ts[r])
            seen = set()
        seen |= keys_of[r]
        tick[r] = k
    return tick


def columns(s: Samples) -> tuple[Array, dict[tuple[int, str], Array]]:
    """``(tick times, {(gpu, key): values per tick})`` with records merged into ticks
    (:data:`MERGE_S`); NaN where a tick has no value."""
    ts = np.round(np.asarray(s.ts, dtype=np.float64), 3)  # W&B times to the millisecond
    n = len(ts)
    keys_of: list[set[tuple[int, str]]] = [set() for _ in range(n)]
    for key, pairs in s.values.items():
        for row, _v in pairs:
            keys_of[row].add(key)
    tick = _ticks(ts, keys_of)
    m = int(tick[-1]) + 1 if n else 0
    t_out = np.full(m, np.nan)
    # a tick's time is its first record's
    first: Array = np.flatnonzero(np.concatenate(([True], np.diff(tick) > 0))) if n \
        else np.zeros(0, dtype=np.int64)
    t_out[:] = ts[first] if n else t_out
    out: dict[tuple[int, str], Array] = {}
    for key, pairs in s.values.items():
        col = np.full(m, np.nan)
        rows = np.fromiter((r for r, _ in pairs), dtype=np.int64, count=len(pairs))
        vals = np.fromiter((v for _, v in pairs), dtype=np.float64, count=len(pairs))
        col[tick[rows]] = vals
        out[key] = col
    return t_out, out


def metrics_of(cols: dict[str, Array], total_mib: float | None
               ) -> dict[str, Array]:
    """One GPU's catalogue columns from its W&B keys (``cols``: key -> values per tick)."""
    out: dict[str, Array] = {}
    for key, name in DIRECT.items():
        if key in cols:
            out[name] = cols[key]
    watts, pct = cols.get("powerWatts"), cols.get("powerPercent")
    if "enforced.power.limit" not in out and watts is not None and pct is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            limit = np.where((watts > 0) & (pct > 0), watts / pct * 100.0, np.nan)
        out["enforced.power.limit"] = np.round(limit, 1)
    used_b, used_pct = cols.get("memoryAllocatedBytes"), cols.get("memoryAllocated")
    total = _total_mib(used_b, used_pct) or total_mib
    if used_b is not None:
        out["memory.used"] = used_b / 2**20
    elif used_pct is not None and total:
        out["memory.used"] = used_pct / 100.0 * total
    if "memory.used" in out and total:
        out["memory.total"] = np.where(np.isnan(out["memory.used"]), np.nan, total)
    return out


def _total_mib(used_b: Array | None, pct: Array | None) -> float | None:
    """The framebuffer size (MiB) that bytes and percent imply: the median of bytes /
    percent over the ticks with percent >= 1 (below, rounding dominates)."""
    if used_b is None or pct is None:
        return None
    ok = (pct >= 1.0) & ~np.isnan(used_b)
    if not ok.any():
        return None
    return float(np.round(np.median(used_b[ok] / (pct[ok] / 100.0)) / 2**20))
