"""nvidia-smi's leading timestamp column read straight from the bytes, with numpy.

``nvidia-smi --query-gpu=timestamp,…`` starts every line with a fixed-width local time,
``2026/04/19 14:28:10.123`` (23 bytes; 19 without milliseconds). Handing that column to
``pandas.read_csv`` costs about a quarter of the whole parse (a million strings hashed
into categories, then parsed per distinct value). Here the digits are gathered at their
fixed offsets from each line start and turned into POSIX seconds with integer arithmetic:
no string objects, and numpy releases the GIL while it works, so a parsing thread leaves
the detector's thread alone.

Only exact, valid layouts are accepted; anything else (a blank line, another format, an
impossible date such as Feb 30) makes :func:`times` return None and the caller parses the
column the general way, which also words the error.
"""

from __future__ import annotations

import re

import numpy as np

from watchdog.untyped import Array

_LAYOUT = re.compile(rb"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d{3})?,")
_SEPS = {4: b"/", 7: b"/", 10: b" ", 13: b":", 16: b":", 19: b"."}


def width_of(line: bytes) -> int | None:
    """Width of ``line``'s leading nvidia-smi timestamp (23 or 19), or None."""
    m = _LAYOUT.match(line)
    if m is None:
        return None
    return 23 if m.group(1) else 19


def times(data: bytes, width: int, rows: int) -> Array | None:
    """POSIX seconds (UTC, float64) of the leading timestamp of each of the ``rows`` lines
    of ``data`` (every line starting with one; the last may lack its newline); None when
    a line does not have exactly that layout.

    The value is what :func:`~watchdog.sources.replay.convert.parse_timestamps` gives for
    a naive UTC time: integer microseconds divided by 1e6.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    if not len(buf):
        return None
    nl = np.flatnonzero(buf == 10)
    ends_nl = buf[-1] == 10
    starts = np.empty(len(nl) + (0 if ends_nl else 1), dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl[:len(starts) - 1] + 1
    if len(starts) != rows or int(starts[-1]) + width >= len(buf):
        return None  # blank lines, lone carriage returns, a short last line
    # one row of width + 1 bytes per line (the text and the comma after it)
    m = np.lib.stride_tricks.sliding_window_view(buf, width + 1)[starts]
    seps = [(off, ch) for off, ch in _SEPS.items() if off < width] + [(width, b",")]
    want = np.frombuffer(b"".join(ch for _, ch in seps), dtype=np.uint8)
    if not bool((m[:, [off for off, _ in seps]] == want).all()):
        return None
    digit_at = [i for i in range(width) if i not in _SEPS]
    d = m[:, digit_at] - np.uint8(48)  # wraps below "0": one test catches both sides
    if not bool((d <= 9).all()):
        return None

    def num(cols):  # the digits in columns cols, as int64
        out = np.zeros(len(d), dtype=np.int64)
        for j in range(cols.start, cols.stop):
            out *= 10
            out += d[:, j]
        return out

    year, month, day = num(slice(0, 4)), num(slice(4, 6)), num(slice(6, 8))
    hour, minute, sec = num(slice(8, 10)), num(slice(10, 12)), num(slice(12, 14))
    ms = num(slice(14, 17)) if width == 23 else 0
    if not bool(((month >= 1) & (month <= 12) & (day >= 1) & (hour < 24) & (minute < 60)
                 & (sec < 60)).all()):
        return None
    months = (year - 1970) * 12 + (month - 1)
    first = months.astype("M8[M]").astype("M8[D]").astype(np.int64)
    after = (months + 1).astype("M8[M]").astype("M8[D]").astype(np.int64)
    days = first + day - 1
    if not bool((days < after).all()):  # Feb 30 and the like
        return None
    us = ((days * 86_400 + hour * 3_600 + minute * 60 + sec) * 1_000_000 + ms * 1_000)
    return us.astype(np.float64) / 1e6
