"""A CSV log as text cells, for writing faults into copies of real logs (:mod:`.inject`).

:class:`RawLog` reads an ``nvidia-smi`` CSV (or any CSV through a mapping) as its cells,
knows what each column is (the replay reader's own column assignment), each row's time
and GPU, and writes values back in the column's own style: leading blanks, decimals,
unit suffix, hex masks, the timestamp's format. It inserts rows (the stretch before a
fault goes on under it), removes column groups (:data:`DROP_GROUPS`), derives columns
some loggers write instead of others (``memory.free`` for ``memory.total``,
``temperature.gpu.tlimit`` for a known GPU) and thins the sampling.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from watchdog.sources.replay import convert
from watchdog.sources.replay.smi_columns import assign
from watchdog.untyped import Array

# the stretch before the onset that goes on under the fault (s). Not a whole minute: copies
# 60 s apart keep their phase against a sampler every 10, 30 or 60 s, so a sub-second dip
# it caught once comes back in every copy (nanoGPT dips for 0.3 s every 22 s; its 10 s
# copy with a repeated minute caught the dip 7 minutes running, the log itself about every
# 6 minutes); 67 s moves the phase by 7 s a copy
REPEAT_S = 67.0
IDLE_MAX_FRAC = 0.35  # of the power limit: an "idle" level above it is a loaded pause
DROP_GROUPS: dict[str, tuple[str, ...]] = {
    "limit": ("enforced.power.limit", "inv:power.default_limit", "inv:power.max_limit",
              "inv:power.min_limit"),
    "clocks": ("clocks.sm", "clocks.gr", "clocks.mem", "inv:clocks.max.sm",
               "inv:clocks.max.memory"),
    "reasons": ("clocks_event_reasons.active",),  # and every reason:<bit> column
    "total": ("memory.total",),
    "free": ("memory.free", "memory.reserved"),
    "temperature": ("temperature.gpu", "temperature.memory", "temperature.gpu.tlimit"),
    "name": ("name",),
    "memory": ("memory.used", "memory.total", "memory.free", "memory.reserved",
               "utilization.memory"),
    "power": ("power.draw", "enforced.power.limit"),
}
_NUMBER = re.compile(r"^(\s*)([-+]?\d+(?:\.(\d+))?)(.*)$")
_HEX = re.compile(r"^(\s*)0[xX]([0-9a-fA-F]+)(.*)$")
_TIME = re.compile(r"^(\s*)(\d{4})([-/])(\d{2})[-/](\d{2})([T ])(\d{2}):(\d{2}):(\d{2})"
                   r"(?:\.(\d+))?(Z?)(\s*)$")



class _Style:
    """How a column writes its numbers: leading blanks, decimals, unit suffix, hex."""

    def __init__(self, cells: list[str]) -> None:
        self.lead, self.suffix, self.decimals, self.hex_digits = " ", "", 0, 0
        self.upper = True
        decimals = []
        for c in cells:
            m = _HEX.match(c)
            if m:
                self.lead, self.hex_digits, self.suffix = m.group(1), len(m.group(2)), m.group(3)
                self.upper = not any(ch in "abcdef" for ch in m.group(2))
                return
            m = _NUMBER.match(c)
            if m:
                self.lead, self.suffix = m.group(1), m.group(4)
                decimals.append(len(m.group(3) or ""))
        if decimals:
            self.decimals = max(decimals)

    def format(self, v: float) -> str:
        if self.hex_digits:
            digits = f"{int(v):0{self.hex_digits}x}"
            return f"{self.lead}0x{digits.upper() if self.upper else digits}{self.suffix}"
        return f"{self.lead}{v:.{self.decimals}f}{self.suffix}"


def _number(cell: str) -> float:
    m = _HEX.match(cell)
    if m:
        return float(int(m.group(2), 16))
    m = _NUMBER.match(cell)
    return float(m.group(2)) if m else math.nan


class LogReadings:
    """What the faults read of a log, whatever holds its values: each row's time ``ts``
    (POSIX s) and GPU ``gpu`` (index as logged), and :meth:`values` of a column by its
    role (a catalogue metric). :class:`RawLog` holds a CSV's text cells,
    :class:`~watchdog.testing.framelog.FrameLog` a recording's frame."""

    ts: Array
    gpu: Array

    def values(self, role: str) -> Array:  # pragma: no cover - each log has its own
        raise NotImplementedError

    def has(self, role: str) -> bool:  # pragma: no cover - each log has its own
        raise NotImplementedError

    def gpus(self) -> list[int]:
        return sorted(set(self.gpu.tolist()))

    @property
    def start(self) -> float:
        return float(self.ts.min())

    @property
    def end(self) -> float:
        return float(self.ts.max())

    def interval(self) -> float:
        """The median time between one GPU's samples (s)."""
        g0 = self.gpus()[0]
        return float(np.median(np.diff(self.ts[self.gpu == g0])))

    def idle_w(self, g: int) -> float | None:
        """The GPU's idle power in this log (W): the lowest 30 s median power while its
        30 s median utilization is below 5 %, or None when it never idles.

        Also None where that level is above :data:`IDLE_MAX_FRAC` of the GPU's power limit
        (where the log has one): such a GPU never idled in the log, it paused loaded. A
        GPU idle with a CUDA context draws at most 0.32 of its limit in the shared real
        runs (an RTX A6000 between RL steps, 96 of 300 W; an H100 122 of 700 W, an H20
        116 of 500 W), while the A100 80GB PCIe GPUs of ``real-wandb`` ``lilinwz/ProRAG``
        read 123 and 186 of 300 W at under 5 %: 1.5x that is work, not a hang."""
        mine = self.gpu == g
        util = pd.Series(self.values("utilization.gpu")[mine], index=pd.to_datetime(
            self.ts[mine], unit="s"))
        power = pd.Series(self.values("power.draw")[mine], index=util.index)
        u = util.rolling("30s").median()
        p = power.rolling("30s").median()
        idle = p[u < 5].dropna()
        if not len(idle):
            return None
        level = float(idle.min())
        if self.has("enforced.power.limit"):
            limit = self.values("enforced.power.limit")[mine]
            if not np.isnan(limit).all() and level > IDLE_MAX_FRAC * float(np.nanmedian(limit)):
                return None
        return level

    def busy_gpus(self, at: float, util: float = 50.0, span: float = 30.0) -> list[int]:
        """GPUs whose mean utilization over the ``span`` s before ``at`` is >= ``util``."""
        u = self.values("utilization.gpu")
        near = (self.ts >= at - span) & (self.ts < at)
        return [g for g in self.gpus()
                if near[self.gpu == g].any() and np.nanmean(u[near & (self.gpu == g)]) >= util]

    def busy_time(self, after: float, util: float = 80.0, span: float = 60.0) -> float:
        """The first time (POSIX s) at least ``after`` s into the log at which some GPU has
        been at ``util`` % or more (mean) for the ``span`` s before: a good fault onset."""
        u = self.values("utilization.gpu")
        for g in self.gpus():
            mine = self.gpu == g
            s = pd.Series(u[mine], index=pd.to_datetime(self.ts[mine], unit="s"))
            ok = s.rolling(f"{span:g}s").mean() >= util
            t = self.ts[mine]
            good = ok.to_numpy() & (t >= self.start + max(after, span))
            if good.any():
                return float(t[np.argmax(good)])
        raise ValueError(f"no GPU busy for {span:g} s in this log")

    def inserted(self, onset: float, duration: float) -> tuple[Array, Array, float]:
        """The log's rows with the :data:`REPEAT_S` before ``onset`` (POSIX s) repeated for
        ``duration`` s from ``onset`` on (:meth:`insert`): each new row's source row, its
        time (s), and how far the later rows move on (s: a whole number of repeats)."""
        src = np.flatnonzero((self.ts >= onset - REPEAT_S) & (self.ts < onset))
        if not len(src):
            raise ValueError("no rows before the onset to go on from")
        period = onset - float(self.ts[src[0]])
        copies = max(1, math.ceil(duration / period))
        shift = copies * period
        before = np.flatnonzero(self.ts < onset)
        later = np.flatnonzero(self.ts >= onset)
        order = np.concatenate([before, np.tile(src, copies), later])
        times = np.concatenate([self.ts[before],
                                *[self.ts[src] + (k + 1) * period for k in range(copies)],
                                self.ts[later] + shift])
        return order, times, shift

    def noise(self, role: str, g: int) -> Array:
        """Each sample's deviation from the local median (9 samples) of column ``role``,
        relative to that median, for GPU ``g``'s rows (0 where unknown)."""
        x = self.values(role)[self.gpu == g]
        med = pd.Series(x).rolling(9, center=True, min_periods=1).median().to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(med != 0, (x - med) / med, 0.0)
        return np.nan_to_num(rel)


class RawLog(LogReadings):
    """A CSV log as text cells, with what each column is and each row's time and GPU."""

    def __init__(self, path: str | Path, mapping: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        text = self.path.read_text()
        lines = text.splitlines()
        self.header = lines[0].split(",")
        width = len(self.header)
        self.rows = [ln.split(",") for ln in lines[1:] if ln.strip()]
        self.tail: list[str] | None = None  # an incomplete last line, kept as it was
        if self.rows and len(self.rows[-1]) != width:
            self.tail = self.rows.pop()
        self.mapping = dict(mapping or {})
        self.roles = assign(pd.DataFrame(columns=self.header), self.mapping, str(path), [])
        self._col = {role: self.header.index(col) for role, col in self.roles.items()}
        tcol = self._col["timestamp"]
        self._time_style = next((m for m in (_TIME.match(r[tcol]) for r in self.rows) if m),
                                None)
        self._refresh()

    # --- reading ------------------------------------------------------------------------
    def _refresh(self) -> None:
        tcol = self._col["timestamp"]
        cells = pd.Series([r[tcol] for r in self.rows], dtype=object)
        self.ts = convert.parse_timestamps(cells, tz=None, where=lambda i: f"row {i}")
        if "index" in self._col:
            self.gpu = np.array([int(_number(r[self._col["index"]])) for r in self.rows])
        elif "uuid" in self._col:
            self.gpu = pd.factorize(pd.Series([r[self._col["uuid"]].strip()
                                               for r in self.rows]))[0]
        else:  # GPUs of one time step told apart by their order in it (as the reader does)
            self.gpu = pd.Series(self.ts).groupby(self.ts, sort=False).cumcount().to_numpy()

    def has(self, role: str) -> bool:
        return role in self._col

    def values(self, role: str) -> Array:
        """A column as floats (NaN where missing); an absent column is all NaN."""
        if role not in self._col:
            return np.full(len(self.rows), math.nan)
        c = self._col[role]
        return np.array([_number(r[c]) for r in self.rows])

    # --- writing ------------------------------------------------------------------------
    def set(self, role: str, rows: Array, vals: Array) -> None:
        """Write ``vals`` into column ``role`` at ``rows`` in the column's own style."""
        if role not in self._col or not len(rows):
            return
        c = self._col[role]
        style = _Style([r[c] for r in self.rows[:200]])
        for i, v in zip(rows.tolist(), vals.tolist(), strict=True):
            if not math.isnan(v):
                self.rows[i][c] = style.format(v)

    def set_text(self, role: str, rows: Array, text: str) -> None:
        if role in self._col:
            c = self._col[role]
            for i in rows.tolist():
                self.rows[i][c] = text

    def insert(self, onset: float, duration: float) -> float:
        """Repeat the rows of the :data:`REPEAT_S` before ``onset`` (POSIX s) for
        ``duration`` s from ``onset`` on; later rows move on by as much (returned, s: a
        whole number of repeats, at least ``duration``)."""
        order, times, shift = self.inserted(onset, duration)
        kept = int((self.ts < onset).sum())  # the rows before the onset stay as they are
        tcol = self._col["timestamp"]
        rows = [self.rows[i] for i in order[:kept].tolist()]
        for i, t in zip(order[kept:].tolist(), times[kept:].tolist(), strict=True):
            row = list(self.rows[i])  # repeated or moved on: a copy with its new time
            row[tcol] = self._format_time(t)
            rows.append(row)
        if self.tail is not None and bool((self.ts >= onset).any()):
            self.tail = None  # an incomplete last line would now sit mid-log: dropped
        self.rows = rows
        self._refresh()
        assert np.allclose(self.ts, times, atol=2e-3)
        return shift

    def _format_time(self, t: float) -> str:
        m = self._time_style
        if m is None:  # plain POSIX seconds
            return f"{t:.3f}"
        dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=t)
        digits = len(m.group(10) or "")
        sep = m.group(3)
        text = (f"{dt.year:04d}{sep}{dt.month:02d}{sep}{dt.day:02d}{m.group(6)}"
                f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}")
        if digits:
            frac = f"{dt.microsecond:06d}"[:digits] if digits <= 6 else f"{dt.microsecond:06d}"
            text += "." + frac
        return f"{m.group(1)}{text}{m.group(11)}{m.group(12)}"

    def drop(self, *groups: str) -> None:
        """Remove the columns of ``groups`` (keys of :data:`DROP_GROUPS`), and any column
        that then stands in for one of them (``power.limit`` for the enforced limit)."""
        roles: set[str] = set()
        for g in groups:
            roles.update(DROP_GROUPS[g])
        while True:
            cols = sorted({c for r, c in self._col.items()
                           if r in roles or ("reasons" in groups and r.startswith("reason:"))},
                          reverse=True)
            if not cols:
                return
            for c in cols:
                del self.header[c]
                for r in self.rows:
                    del r[c]
                if self.tail is not None and c < len(self.tail):
                    del self.tail[c]
            self.mapping = {k: v for k, v in self.mapping.items() if v in self.header}
            self.roles = assign(pd.DataFrame(columns=self.header), self.mapping,
                                str(self.path), [])
            self._col = {role: self.header.index(col) for role, col in self.roles.items()}

    def derive(self, what: str, max_operating_c: float | None = None) -> None:
        """Add a column some loggers write instead of another, from this log's values, in
        the style of the column it comes from: ``"free"`` writes ``memory.free`` = total -
        used (where ``memory.total`` is logged; the caller may then drop the total);
        ``"tlimit"`` writes ``temperature.gpu.tlimit`` = ``max_operating_c`` - temperature
        (the GPU's margin to its max operating temperature, as NVML reports T.Limit)."""
        if what == "free":
            src, name = "memory.total", "memory.free"
            vals = self.values("memory.total") - self.values("memory.used")
        elif what == "tlimit":
            if max_operating_c is None:
                raise ValueError("tlimit needs the GPU's max operating temperature")
            src, name = "temperature.gpu", "temperature.gpu.tlimit"
            vals = max_operating_c - self.values("temperature.gpu")
        else:
            raise ValueError(f"cannot derive {what!r}")
        if src not in self._col or name in self._col:
            return
        c = self._col[src]
        style = _Style([r[c] for r in self.rows[:200]])
        head = self.header[c]
        unit = head[head.index("["):] if "[" in head else ""
        self.header.append(f" {name} {unit}".rstrip() if head.startswith(" ") else
                           f"{name} {unit}".rstrip())
        for r, v in zip(self.rows, vals.tolist(), strict=True):
            r.append(style.format(v) if not math.isnan(v) else " [N/A]")
        if self.tail is not None:
            self.tail = None  # an incomplete last line cannot take the new column
        self.roles = assign(pd.DataFrame(columns=self.header), self.mapping, str(self.path), [])
        self._col = {role: self.header.index(col) for role, col in self.roles.items()}

    def thin(self, step: float) -> None:
        """Keep one sample per GPU every ``step`` s (the first in each step)."""
        keep = np.zeros(len(self.rows), bool)
        for g in self.gpus():
            idx = np.flatnonzero(self.gpu == g)
            bucket = np.floor((self.ts[idx] - self.start) / step)
            first = np.concatenate(([True], bucket[1:] != bucket[:-1]))
            keep[idx[first]] = True
        self.rows = [r for r, k in zip(self.rows, keep, strict=True) if k]
        self._refresh()

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        lines = [",".join(self.header), *(",".join(r) for r in self.rows)]
        if self.tail is not None:
            lines.append(",".join(self.tail))
        p.write_text("\n".join(lines) + "\n")
        return p
