"""The head and tail of an ``nvidia-smi`` CSV log, before any row is parsed
(:func:`prepare`, used by :mod:`.smi_csv` and :mod:`.parts`).

From the first lines and the last one alone: whether there is a header (a first line none
of whose fields looks like a value), how many fields a line has, a header repeated before
every sample (a logging loop: skipped and counted), a header ignored because the columns
are mapped by number, ``nvidia-smi``'s table output (answered with how to log CSV), and a
truncated last line (dropped with a warning). Where each data row sits in the file is
worked out only when a message needs a line number (:class:`Lines`).

Bounds, checked from the head before any parsing: the header line at most 64 KiB and
:data:`MAX_COLUMNS` columns; then, in two ``memchr`` passes over the file
(:meth:`.blob.Blob.check_text`), no NUL byte and no line longer than 64 KiB. A NUL tail
(a crash mid-write) was cut off before, with a warning (:meth:`.blob.Blob.trim_nul_tail`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from watchdog.errors import InputError
from watchdog.sources.replay import convert
from watchdog.sources.replay.blob import HEAD, MAX_LINE, Blob
from watchdog.untyped import Array

#: The most columns a CSV log may have (``nvidia-smi --query-gpu`` knows about 300 fields).
MAX_COLUMNS = 1024


def base_name(name: str) -> str:
    """``power.draw [W]`` -> ``power.draw`` (lower case, unit suffix dropped)."""
    return name.split("[", 1)[0].strip().lower()


def _is_value(text: str) -> bool:
    """Whether a header-line field looks like data (a number, a time, a marker)."""
    t = text.strip()
    if t.lower() in convert.MISSING_TEXT or (t.startswith("[") and t.endswith("]")):
        return True
    if convert._NUM.match(t) or (t[:1] in ("P",) and t[1:].isdigit()):
        return True
    return t[:4].isdigit() and len(t) >= 8  # 2026/04/19 ..., 2026-04-19T...


def looks_like_header(line: str) -> bool:
    """A first line is a header when none of its fields looks like a value."""
    fields = line.split(",")
    return not any(_is_value(f) for f in fields)


def layout(data: bytes) -> tuple[Array, Array, Array]:
    """Per line: start offset, end offset (exclusive, newline dropped), comma count.

    Vectorised: the comma count of each line is the number of comma positions between its
    start and end, found with two binary searches over the sorted comma positions.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], nl + 1))
    if len(starts) and starts[-1] >= len(arr):
        starts = starts[:-1]
    ends = np.concatenate((nl, [len(arr)]))[: len(starts)]
    commas_at = np.flatnonzero(arr == 44)
    commas = np.searchsorted(commas_at, ends) - np.searchsorted(commas_at, starts)
    return starts, ends, commas


class Lines:
    """Where each data row sits in the file, computed only when a message needs it."""

    def __init__(self, data: Callable[[], bytes], has_header: bool) -> None:
        self._get = data
        self._has_header = has_header
        self._rows: Array | None = None
        self._commas: Array | None = None
        self._starts = np.empty(0, np.int64)

    def _compute(self) -> None:
        data = self._get()
        starts, ends, commas = layout(data)
        lengths = ends - starts
        blank = lengths == 0
        if len(lengths):
            cr = np.frombuffer(data, dtype=np.uint8)[np.maximum(ends - 1, 0)] == 13
            blank |= (lengths == 1) & cr
        nonblank = np.flatnonzero(~blank)
        rows = nonblank[1:] if self._has_header else nonblank
        self._rows, self._commas = rows + 1, commas[rows]
        self._starts = starts[rows]

    def rows_before(self, offset: int) -> int:
        """Data rows whose line starts before byte ``offset`` (a part's first row)."""
        if self._rows is None:
            self._compute()
        return int(np.searchsorted(self._starts, offset))

    def consistent(self, n_rows: int) -> bool:
        """Whether pandas saw as many rows as there are data lines (no CR-only line ends,
        no quoted newlines); only then do row numbers map onto lines."""
        if self._rows is None:
            self._compute()
        assert self._rows is not None
        return len(self._rows) == n_rows

    def line(self, row: int) -> int | None:
        """1-based file line of data row ``row``."""
        if self._rows is None:
            self._compute()
        assert self._rows is not None
        return int(self._rows[row]) if row < len(self._rows) else None

    def fields(self, row: int) -> int:
        if self._commas is None:
            self._compute()
        assert self._commas is not None
        return int(self._commas[row]) + 1


@dataclass
class Prep:
    """What the head and tail of a CSV log say before any row is parsed."""

    path: str
    blob: Blob
    mapping: dict[str, str]
    warnings: list[str]
    pos: int  # offset of the header (or first) line
    first_no: int  # its 1-based line number
    first_line: str
    has_header: bool
    expected: int  # commas per line
    body_end: int  # bytes read (a truncated last line is left out)
    lines: Lines
    dtypes: dict[str, str] | None
    repeats: int = 0  # repeated header lines dropped (the bytes are then in memory)
    skip: int = 0  # lines read_csv skips: an ignored header (reading by column number)

    def where(self, row: int) -> str:
        """``file:line`` of data row ``row``."""
        ln = self.lines.line(row)
        return f"{self.path}:{ln if ln is not None else '?'}"


def prepare(path: str, blob: Blob, mapping: dict[str, str] | None) -> Prep:
    """Decide the header, the field count and a truncated last line from the head and
    tail of the file (no row is parsed here)."""
    mapping = dict(mapping or {})
    warnings: list[str] = list(blob.notes)
    head = blob.head
    if b"\n" not in head and not blob.loaded:
        raise InputError(f"{path}:1: the first line is longer than {HEAD >> 10} KiB (not a "
                         "GPU log?)")
    pos = 0
    while True:  # skip leading blank lines
        nl = head.find(b"\n", pos)
        line = head[pos:] if nl < 0 else head[pos:nl]
        if line.strip() or nl < 0:
            break
        pos = nl + 1
    first_line = line.decode("utf-8", "replace").strip()
    if not first_line:
        raise InputError(f"{path}: empty file (no lines)")
    first_no = head.count(b"\n", 0, pos) + 1
    if first_line.startswith(("+---", "| NVIDIA-SMI", "|===")) or "NVIDIA-SMI" in first_line:
        raise InputError(f"{path}:{first_no}: this is nvidia-smi's table output, not a log: "
                         "record a CSV log with nvidia-smi --query-gpu=timestamp,index,uuid,"
                         "utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,"
                         "clocks.sm,clocks_event_reasons.active --format=csv -l 1 > gpu.csv "
                         "(or use watchdog record)")
    numbered = bool(mapping) and all(v.strip().lstrip("#").isdigit() for v in mapping.values())
    if numbered:
        mapping = {k: v.strip().lstrip("#") for k, v in mapping.items()}
    has_header = not numbered and looks_like_header(first_line)
    skip = 0  # lines before the first data row that read_csv must skip (header ignored)
    if numbered and looks_like_header(first_line):
        # the user reads by column number: a header (e.g. one that does not match its
        # rows) is ignored, the data starts on the next non-blank line
        skip = first_no
        while True:
            pos = head.find(b"\n", pos) + 1
            if pos <= 0 or pos >= len(head):
                raise InputError(f"{path}:{first_no}: a header but no samples (nothing to "
                                 "replay)")
            nl = head.find(b"\n", pos)
            line = head[pos:] if nl < 0 else head[pos:nl]
            if line.strip():
                break
        warnings.append(f"{path}:{first_no}: header line ignored (--map by column number)")
        first_line = line.decode("utf-8", "replace").strip()
        first_no = head.count(b"\n", 0, pos) + 1
    if not has_header and not numbered:
        raise InputError(f"{path}:{first_no}: no header line; name the columns by number, "
                         "e.g. --map timestamp=1,index=2,power.draw=3")
    expected = first_line.count(",")
    if expected + 1 > MAX_COLUMNS:
        raise InputError(f"{path}:{first_no}: {expected + 1} columns, more than the "
                         f"{MAX_COLUMNS} a GPU log may have")
    blob.check_text()  # no NUL byte, no line longer than MAX_LINE: before any parsing
    repeats = 0
    raw_line = line.rstrip(b"\r")
    if has_header and blob.dropped:
        repeats = blob.dropped  # a second reader of the same blob (parts -> whole)
    elif has_header and ((b"\n" + raw_line) in head[pos + len(line):] or (
            blob.loaded and (b"\n" + raw_line) in blob.all()[pos + len(line):])):
        # a log appended by `nvidia-smi --query-gpu=… --format=csv` in a loop: the header
        # line before every sample. Identical repeats are dropped and counted.
        repeats = blob.drop_repeats(raw_line)
    if repeats:
        warnings.append(f"{path}: {repeats} repeated header line(s) skipped (a log "
                        "appended in a loop; add ,noheader to --format after the first)")
    body_end = blob.size
    tail = blob.tail(2 * MAX_LINE + 2)  # holds a line end unless the file is one line
    if not tail.endswith(b"\n"):
        if b"\n" not in tail and not blob.loaded:
            tail = blob.all()
        last_start = blob.size - len(tail) + tail.rfind(b"\n") + 1
        last_text = tail[tail.rfind(b"\n") + 1:].rstrip(b"\r")
        if last_start > pos and (last_text.count(b",") < expected or last_text.endswith(b",")):
            ln = blob.count_lines(last_start) + 1
            warnings.append(f"{path}:{ln}: truncated last line dropped")
            body_end = last_start
    lines = Lines(lambda: blob.all()[:body_end], has_header or bool(skip))
    dtypes = _text_columns(head, pos, first_line) if has_header else None
    return Prep(path, blob, mapping, warnings, pos, first_no, first_line, has_header,
                expected, body_end, lines, dtypes, repeats, skip)


def _text_columns(body: bytes, pos: int, header: str) -> dict[str, str]:
    """Columns whose first value is not a plain number are read as ``category``.

    The C parser then hashes each distinct text once instead of building a Python string
    per row (timestamps, UUIDs, hex masks, ``P0``, ``41772 MiB``): as fast as a plain
    read, and the conversions work on the categories.
    """
    start = body.find(b"\n", pos) + 1
    if start <= 0:
        return {}
    end = body.find(b"\n", start)
    row = body[start:end if end >= 0 else len(body)].decode("utf-8", "replace").split(",")
    names = header.split(",")
    out = {}
    for name, value in zip(names, row, strict=False):
        try:
            float(value)
        except ValueError:
            out[name] = "category"
    return out
