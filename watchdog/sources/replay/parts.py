"""A large ``nvidia-smi`` CSV log read in parts on worker threads.

``watchdog replay`` of a long log spends about as long parsing as detecting. Read whole,
the detector waits for the last row before it sees the first. Read in parts, two worker
threads parse the next parts (``pandas.read_csv``'s tokenizer releases the GIL for much of
its work) while the detector works on the parts already read; ``open_log`` joins the
parts of a large log the same way, only sooner than one parse of the whole file.

The parts are cut at line ends up front; when the lines start with nvidia-smi's
fixed-width timestamp a part also ends on a tick (its last time's rows are all in it:
compared as bytes), and those timestamps are read straight from the bytes
(:mod:`.fixedtime`). Each part is converted by the same code as a whole log
(:func:`.smi_columns.to_recording`). Only a log whose parts can be used exactly as they are
is read this way; the first part that cannot raises :class:`NotInParts` and the caller reads
the whole log the usual way, which sorts, names the line of any error, and so on. A part
cannot be used when its rows are out of (time, index) order or do not follow the
previous part's, when it holds a GPU the first part did not list, when a row is short,
when parsing or converting it meets anything odd, or when the log has no index column.
Only the first is likely in a real log: nothing is lost but the time spent.

:meth:`Parts.whole` puts the parts back together into the :class:`Recording` the
whole-file reader gives (frame, inventory, row errors, warnings: tested equal).
"""

from __future__ import annotations

import io
import mmap
import re
import warnings as _warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pandas as pd

from watchdog.errors import InputError
from watchdog.sources.replay import fixedtime, smi_columns, smi_layout
from watchdog.sources.replay.blob import Blob
from watchdog.sources.replay.frame import SNAP_S, OutOfOrder, Recording

MIN_BYTES = 4 << 20  # smaller logs (~30 000 rows) parse in a blink: read them whole
FIRST_BYTES = 2 << 20  # a small first part: the detector starts early
PART_BYTES = 16 << 20  # about one detector block (~120 000 nvidia-smi rows)
WORKERS = 2  # parsing threads (the detector works on the calling thread)
_ABSURD = re.compile(r"^(?P<where>\S+): column (?P<col>'[^']*'): (?P<n>\d+) absurd value\(s\)"
                     r"(?P<rest>.*)$")


class NotInParts(Exception):
    """This log cannot be read in parts (the reason is the message); read it whole."""


def cut(data: mmap.mmap, start: int, end: int, width: int | None) -> list[tuple[int, int]]:
    """Byte ranges ``[a, b)`` covering ``[start, end)`` at line ends: ``FIRST_BYTES``, then
    ``PART_BYTES`` each. With ``width`` (lines start with a timestamp that wide) a range
    also takes the following lines with the same timestamp: parts end on a tick."""
    out: list[tuple[int, int]] = []
    a, target = start, FIRST_BYTES
    while a < end:
        nl = data.find(b"\n", a + target, end) if end - a > target else -1
        if nl < 0:
            out.append((a, end))
            break
        b = nl + 1
        if width is not None:  # compare the next lines' timestamps with this line's
            line = data.rfind(b"\n", a, nl) + 1  # the line that ends at nl
            stamp = data[line:line + width]
            # the rows of one query are stamped a few ms apart (snap_ticks joins them):
            # take lines while they are less than SNAP_S after the previous one
            for _ in range(4096):
                if b >= end:
                    break
                nxt_stamp = data[b:b + width]
                if nxt_stamp != stamp:
                    both = fixedtime.times(stamp + b",\n" + nxt_stamp + b",\n", width, 2)
                    if both is None or not 0 < both[1] - both[0] <= SNAP_S:
                        break
                stamp = nxt_stamp
                nxt = data.find(b"\n", b, end)
                b = end if nxt < 0 else nxt + 1
        out.append((a, b))
        a, target = b, PART_BYTES
    return out


class Parts:
    """Iterate :class:`Recording` parts of one log, parsed ahead on ``WORKERS`` threads.

    Use as a context manager (the worker and the memory map are released on exit);
    iterate once. ``devices()`` are the first part's GPUs.
    """

    def __init__(self, path: str, blob: Blob, *, host: str, tz: str | None) -> None:
        self.path = path
        self.host = host
        self.tz = tz
        self.prep = smi_layout.prepare(path, blob, None)
        prep = self.prep
        if not prep.has_header or '"' in prep.first_line:
            raise NotInParts("no plain header line")
        if prep.repeats:
            raise NotInParts("repeated header lines")
        self.columns = [c.strip() for c in prep.first_line.split(",")]
        names = prep.first_line.split(",")
        self.dtypes = {i: "category" for i, n in enumerate(names) if n in (prep.dtypes or {})}
        try:
            with open(path, "rb") as f:
                self._map: mmap.mmap | None = mmap.mmap(f.fileno(), prep.body_end,
                                                        access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            raise NotInParts("cannot map the file") from None
        body = self._map.find(b"\n", prep.pos) + 1
        if body <= 0 or body >= prep.body_end:
            self.close()
            raise NotInParts("no data lines")
        # nvidia-smi's fixed-width timestamps first on the line: read from the bytes
        self.ts_width = (fixedtime.width_of(self._map[body:body + 64])
                         if smi_layout.base_name(self.columns[0]) == "timestamp"
                         and tz in (None, "UTC") else None)
        if self.ts_width is not None:
            self.dtypes.pop(0, None)
        self.body = body
        self.size = prep.body_end - body  # bytes of data lines
        self.done_bytes = 0  # of them in the parts handed out so far
        self.ranges = cut(self._map, body, prep.body_end, self.ts_width)
        self._pool: ThreadPoolExecutor | None = None
        self._parts: list[Recording] = []

    @property
    def aligned(self) -> bool:
        """Whether every part ends on a tick (every row of a time in one part): so when
        the timestamps are read from the bytes; otherwise a part's last tick may go on in
        the next one."""
        return self.ts_width is not None

    # --- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> Parts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (queued parts are dropped) and release the memory map."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._map is not None:
            self._map.close()
            self._map = None

    # --- parts ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Recording]:
        """The parts in file order, each checked to continue the previous one."""
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="watchdog-parse")
        futures = [self._pool.submit(self._parse, a, b) for a, b in self.ranges]
        first: Recording | None = None
        known: set[str] = set()
        last: tuple[float, int] | None = None
        for fut, (a, b) in zip(futures, self.ranges, strict=True):
            part = fut.result()  # NotInParts from a worker surfaces here
            if first is None:
                first = part
                known = {d.uuid for d in part.devices()}
                if "memory.total" in part.frame.columns and any(
                        d.memory_total_mib is None for d in part.devices()):
                    raise NotInParts("a GPU's memory size is not in the first part")
            elif any(d.uuid not in known for d in part.devices()):
                raise NotInParts("a GPU appears after the first part")
            f = part.frame
            if len(f):
                head = (float(f["ts"].iloc[0]), int(f["index"].iloc[0]))
                if last is not None and not (head[0] > last[0] if self.aligned
                                             else head > last):
                    raise NotInParts("rows out of order across parts")
                last = (float(f["ts"].iloc[-1]), int(f["index"].iloc[-1]))
            self._parts.append(part)
            self.done_bytes += b - a
            yield part

    def _parse(self, a: int, b: int) -> Recording:
        """Parse and convert bytes ``[a, b)`` (on a worker thread)."""
        return self._convert(a, *self._read(a, b))

    def _read(self, a: int, b: int) -> tuple[pd.DataFrame, bytes]:
        """Parse bytes ``[a, b)`` with ``pandas.read_csv``."""
        prep, m = self.prep, self._map
        if m is None:
            raise NotInParts("closed")
        data = m[a:b]
        width = self.ts_width
        fields = prep.expected + 1
        try:
            with _warnings.catch_warnings():
                _warnings.simplefilter("ignore", pd.errors.DtypeWarning)
                raw = pd.read_csv(io.BytesIO(data), header=None, index_col=False,
                                  skip_blank_lines=True, encoding="utf-8",
                                  encoding_errors="replace", dtype=self.dtypes,
                                  usecols=None if width is None else range(1, fields),
                                  na_filter=False)  # ~20 % faster; text is converted later
        except (ValueError, UnicodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
            raise NotInParts("a part does not parse on its own") from None
        if raw.shape[1] != fields - (width is not None) or _blank(raw.iloc[:, -1]):
            raise NotInParts("short or long rows")  # short rows end in blank fields
        return raw, data

    def _convert(self, a: int, raw: pd.DataFrame, data: bytes) -> Recording:
        """Timestamps and conversion of a parsed part that starts at byte ``a``."""
        prep, width = self.prep, self.ts_width
        if width is not None:
            secs = fixedtime.times(data, width, len(raw))
            if secs is None:
                raise NotInParts("a timestamp of another layout")
            raw.insert(0, "timestamp", secs)
        raw.columns = self.columns

        def where(row: int) -> str:  # only for messages: the line layout is found then
            return prep.where(prep.lines.rows_before(a) + row)

        try:
            return smi_columns.to_recording(self.path, raw, mapping={}, host=self.host,
                                            tz=self.tz, fmt="smi_csv", where=where,
                                            warnings=[], part=True)
        except (InputError, OutOfOrder) as e:  # the whole-file read names it properly
            raise NotInParts(str(e)) from None

    # --- the whole ------------------------------------------------------------------------
    @property
    def read(self) -> list[Recording]:
        """The parts handed out so far, in order."""
        return list(self._parts)

    def warnings(self) -> list[str]:
        """The warnings of the parts read so far, worded as the whole-file reader does."""
        order = list(self._parts[0].frame.columns) if self._parts else []
        return merge_warnings(self.prep.warnings, [w for p in self._parts for w in p.warnings],
                              order)

    def whole(self) -> Recording:
        """Every part read so far as one :class:`Recording` (what ``open_log`` gives)."""
        parts = self._parts
        if not parts:
            raise NotInParts("no parts")
        frames = [p.frame for p in parts]
        frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
        errors = {}
        for p in parts:
            errors.update(p.errors)
        return Recording(path=self.path, host=parts[0].host, format=parts[0].format,
                         frame=frame, inventory=parts[0].devices(), errors=errors,
                         warnings=self.warnings())


def _blank(col: pd.Series) -> bool:
    """Whether a column read without NA filtering has a blank field (a short row, or an
    empty last field: the whole-file reader decides what those are)."""
    if pd.api.types.is_numeric_dtype(col.dtype):
        return False
    values = (col.cat.categories if isinstance(col.dtype, pd.CategoricalDtype)
              else pd.unique(col))
    return any(not str(v).strip() for v in values)


def merge_warnings(head: list[str], lines: list[str], order: Sequence[str] = ()) -> list[str]:
    """The parts' warnings as the whole-file reader words them: the header's once, then
    the absurd values of each column as one line (its first place, the total count), in
    column order (``order``: metric names as the columns were converted)."""
    out = list(head)
    absurd: dict[str, tuple[str, str, int]] = {}  # column -> (first place, rest, count)
    for line in lines:
        m = _ABSURD.match(line)
        if m is None:
            if line not in out:
                out.append(line)
            continue
        col = m["col"]
        where, rest, n = absurd.get(col, (m["where"], m["rest"], 0))
        absurd[col] = (where, rest, n + int(m["n"]))
    rank = {f"'{c}'": i for i, c in enumerate(order)}
    for col in sorted(absurd, key=lambda c: rank.get(c, len(rank))):
        where, rest, n = absurd[col]
        out.append(f"{where}: column {col}: {n} absurd value(s){rest}")
    return out
