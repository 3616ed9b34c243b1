"""Column-wise conversion of raw log text into float64 metric columns.

Every conversion here is vectorised: a column is factorised (C hash table), each *distinct*
text is parsed once in Python, and the result is scattered back with a numpy take. Logs
repeat their values a lot (a hex mask, ``P0``, ``95830 MiB``), so this costs a few
thousand Python calls for a million rows, never one per row.

Conventions (units are the catalogue's):

* ``[N/A]``, ``N/A``, ``[Not Supported]``, ``-`` and empty fields are missing (NaN), never 0.
* A value with a unit suffix (``41772 MiB``, ``0 %``, ``250.00 W``) keeps its number.
* ``[GPU is lost]`` marks the row lost; any other bracketed text (``[Unknown Error]``) is a
  read error: the value is missing and the text is kept for ``Sample.errors``.
* Absurd values (negative power, 1e12 W, 150 % utilisation) become missing, with one
  warning per column naming the first line; they are sensor glitches more often than lies
  worth stopping a replay for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from watchdog import reasons
from watchdog.errors import InputError
from watchdog.untyped import Array

#: The highest GPU index a log may name. nvidia-smi and NVML number the GPUs one operating
#: system sees from 0, and the largest nodes have 8 to 16 (a DGX-2/HGX-2 16; a GB200 NVL72
#: rack is 18 nodes of 4): 1023 is 64 times that, the size of the fake NVML's largest test
#: node, and small enough that an index is exact in float64 and int64. A value past it (a
#: corrupted field, 1e30, which once wrapped to INT64_MIN and merged GPUs) or below 0 is
#: not a GPU.
MAX_GPU_INDEX = 1023

MISSING_TEXT = frozenset({"", "n/a", "[n/a]", "[not supported]", "not supported", "-", "nan",
                          "none", "[unknown]"})
_NUM = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)\s*$")

# Plausible ranges per unit (inclusive). Values outside are treated as missing + warning.
# Power allows 20 kW so that a whole-node BMC reading mapped onto a pseudo-GPU still loads;
# its floor is just above 0 because a powered board never reads exactly 0 W, while
# loggers write 0 for a failed read (the ciscoaiteam BMC log does: "jq '.Reading // 0'").
RANGES: dict[str, tuple[float, float]] = {
    "%": (0.0, 100.0),
    "W": (1e-6, 20_000.0),
    "C": (-40.0, 200.0),
    "MHz": (0.0, 20_000.0),
    "MiB": (0.0, 1.0e8),
}


@dataclass
class Problems:
    """What a conversion met besides numbers: lost rows, error texts, warnings."""

    lost: Array | None = None  # bool per row, or None when no row is lost
    errors: dict[int, list[str]] = field(default_factory=dict)  # row -> ["metric: text"]
    warnings: list[str] = field(default_factory=list)

    def mark_lost(self, rows: Array, n: int) -> None:
        if self.lost is None:
            self.lost = np.zeros(n, dtype=bool)
        self.lost |= rows


class Unparsable(ValueError):
    """A text that is neither a number, a missing marker nor an error string."""


def _text_to_float(text: str) -> float:
    t = text.strip()
    if t.lower() in MISSING_TEXT:
        return math.nan
    m = _NUM.match(t)
    if m is None:
        raise Unparsable(t)
    return float(m.group(1))


def parse_pstate(text: str) -> float:
    """``P0`` -> 0.0 (performance state); missing markers -> NaN."""
    t = text.strip()
    if t.lower() in MISSING_TEXT:
        return math.nan
    if t[:1] in ("P", "p") and t[1:].isdigit():
        return float(t[1:])
    return _text_to_float(t)


def parse_mask(text: str) -> float:
    """``0x0000000000000004`` (hex bitmask as nvidia-smi logs it) or a decimal -> float."""
    t = text.strip()
    if t.lower() in MISSING_TEXT:
        return math.nan
    try:
        return float(reasons.parse_mask(t))
    except ValueError:
        raise Unparsable(t) from None


def parse_active(text: str) -> float:
    """``Active`` -> 1.0, ``Not Active`` -> 0.0 (an individual clock-event reason column)."""
    t = text.strip().lower()
    if t in MISSING_TEXT:
        return math.nan
    if t == "active":
        return 1.0
    if t == "not active":
        return 0.0
    raise Unparsable(text.strip())


def factorize(col: pd.Series) -> tuple[Array, pd.Index]:
    """Codes (-1 = missing) and distinct values of a text or categorical column."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), col.cat.categories
    return pd.factorize(col, use_na_sentinel=True)


def convert_column(col: pd.Series, *, metric: str, unit: str, problems: Problems,
                   where: Callable[[int], str],
                   parse: Callable[[str], float] = _text_to_float) -> Array:
    """Convert one raw column to float64 in the catalogue unit.

    ``where(row)`` formats the location of a row (``file:line``) for messages. Raises
    :class:`InputError` for text that is not a value at all (a shifted column, garbage).
    """
    n = len(col)
    if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        out = col.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        codes, uniques = factorize(col)
        parsed = np.empty(len(uniques) + 1, dtype=np.float64)
        parsed[-1] = np.nan  # sentinel -1 indexes the last slot
        lost_codes: list[int] = []
        err_codes: dict[int, str] = {}
        for i, u in enumerate(uniques):
            s = str(u)
            stripped = s.strip()
            if stripped.startswith("[") and stripped.endswith("]") and \
                    stripped.lower() not in MISSING_TEXT:
                parsed[i] = np.nan
                if "lost" in stripped.lower():
                    lost_codes.append(i)
                else:
                    err_codes[i] = stripped[1:-1]
                continue
            try:
                parsed[i] = parse(s)
            except Unparsable as e:
                row = int(np.flatnonzero(codes == i)[0])
                raise InputError(f"{where(row)}: column {metric!r}: {str(e)[:40]!r} is not a "
                                 "value (mismatched columns?)") from None
        out = parsed[codes]
        if lost_codes:
            problems.mark_lost(np.isin(codes, lost_codes), n)
        for code, text in err_codes.items():
            for at in np.flatnonzero(codes == code):
                problems.errors.setdefault(int(at), []).append(f"{metric}: {text}")
    lo_hi = RANGES.get(unit)
    if lo_hi is not None:
        with np.errstate(invalid="ignore"):
            bad = (out < lo_hi[0]) | (out > lo_hi[1])
        if bad.any():
            rows = np.flatnonzero(bad)
            problems.warnings.append(
                f"{where(int(rows[0]))}: column {metric!r}: {len(rows)} absurd value(s) "
                f"such as {out[rows[0]]:g} {unit} treated as missing")
            out = out.copy() if not out.flags.writeable else out
            out[bad] = np.nan
    return out


def parse_timestamps(col: pd.Series, *, tz: str | None,
                     where: Callable[[int], str]) -> Array:
    """Parse a timestamp column to float64 POSIX seconds (UTC).

    Accepts nvidia-smi's ``2026/04/19 14:28:10.123`` (local time of the logging host,
    interpreted in ``tz``, default UTC), ISO 8601 with or without ``Z``/offset, and plain
    POSIX seconds. Each distinct text is parsed once.
    """
    if pd.api.types.is_numeric_dtype(col.dtype):
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    codes, uniques = factorize(col)
    texts = pd.Index(uniques, dtype=object)
    secs = _utc_seconds(texts, tz, fast_only=True)
    if secs is None:  # leading spaces, odd types: strip every text, then the slow path
        texts = pd.Index([str(u).strip() for u in uniques], dtype=object)
        secs = _utc_seconds(texts, tz)
    assert secs is not None  # the slow path reads every text (NaN where not a time)
    table = np.append(secs, np.nan)
    out = table[codes]
    bad = np.isnan(out) | (out < _T_MIN) | (out > _T_MAX)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        text = "" if codes[row] < 0 else str(texts[codes[row]])[:40]
        raise InputError(f"{where(row)}: column 'timestamp': not a time {text!r} "
                         "(expected e.g. 2026/04/19 14:28:10.123 or ISO 8601)")
    return out


_T_MIN = 631_152_000.0  # 1990-01-01: anything earlier in a GPU log is garbage
_T_MAX = 4_102_444_800.0  # 2100-01-01


def _utc_seconds(texts: pd.Index, tz: str | None, fast_only: bool = False
                 ) -> Array | None:
    """POSIX seconds per distinct text (NaN where it is not a time).

    Tries whole-column formats first; with ``fast_only`` returns None when none fits.
    """
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "ISO8601"):
        try:
            dt = pd.to_datetime(texts, format=fmt, utc=False)
            if getattr(dt, "tz", None) is None:
                dt = dt.tz_localize(tz or "UTC", ambiguous="NaT", nonexistent="NaT")
            else:
                dt = dt.tz_convert("UTC")
            secs = dt.as_unit("us").asi8.astype(np.float64) / 1e6
            secs[np.asarray(dt.isna())] = np.nan
            return secs
        except (ValueError, TypeError, OverflowError):
            continue
    if fast_only:
        return None
    return np.array([_one_time(str(t), tz) for t in texts], dtype=np.float64)


def _one_time(text: str, tz: str | None) -> float:
    """Slow path for a column with mixed formats: one distinct text at a time."""
    try:
        return float(text)  # POSIX seconds
    except ValueError:
        pass
    try:
        t = pd.Timestamp(text)
        if t is pd.NaT:
            return math.nan
        t = t.tz_localize(tz or "UTC") if t.tzinfo is None else t.tz_convert("UTC")
        return float(t.timestamp())
    except (ValueError, TypeError, OverflowError):
        return math.nan


def gpu_index(values: Array, column: str, where: Callable[[int], str]) -> Array:
    """GPU indices (float64, NaN already refused by the caller) as int64: whole numbers in
    0..:data:`MAX_GPU_INDEX`, else one :class:`InputError` naming the first row out of
    range. Checked before the cast, so no value wraps and numpy warns of nothing."""
    bad = ~((values >= 0) & (values <= MAX_GPU_INDEX) & (values == np.floor(values)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        v = values[row]
        what = "is not a whole number" if 0 <= v <= MAX_GPU_INDEX else \
            f"is out of range 0-{MAX_GPU_INDEX}"
        raise InputError(f"{where(row)}: column {column!r}: GPU index {v:g} {what}")
    return values.astype(np.int64)
