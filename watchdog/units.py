"""Parsing of human-written quantities: durations like ``90s``, ``10m``, ``1h30m``, ``0.5s``,
and time-zone names.

Used by every command option and config value that takes a duration or a zone, so the
spelling and the error are the same everywhere. Standard library only (on the
``watchdog check`` start-up path).
"""

from __future__ import annotations

import math
import re

from watchdog.errors import InputError

# The one duration grammar: options, config values, rule `for:` and the windows inside
# rule conditions (watchdog.detect.lang tokenises DURATION_PATTERN and calls
# parse_duration). A number and a unit, repeated: 90s, 5m, 1h30m, 0.5s, 250ms, 2d.
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_UNIT = UNITS
DURATION_PATTERN = r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+"
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


#: No duration anywhere in the project is longer than this (100 years): a bigger number is a
#: typo or an attack, and every later sum or datetime conversion of it stays finite.
MAX_SECONDS = 100 * 365.25 * 86400.0
DAY = 86_400.0
#: how long incidents and deliveries are kept by default (the config's ``retention:``)
RETENTION_S = 90 * DAY
#: A duration is at most this many characters (``1h30m15s`` is 8; a long one is a mistake).
MAX_TEXT = 64


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in ``text`` (``"90"`` = 90 s, ``"1m30s"``, ``"0.2s"``, ``"250ms"``).

    Raises InputError naming ``what`` and the text on anything else, including a negative,
    infinite or NaN number and anything longer than :data:`MAX_SECONDS` (100 years): the
    caller gets a finite, non-negative float or a one-line error, never an overflow.
    """
    t = str(text).strip().lower()
    if len(t) > MAX_TEXT:
        raise InputError(f"{what}: {_short(text)} is not a duration (too long)")
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{what}: {text!r} is not a duration")
        return _bounded(value, text, what)
    pos, total = 0, 0.0
    for m in _PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(t) or not t:
        raise InputError(f"{what}: {text!r} is not a duration (use e.g. 30s, 5m, 1h30m)")
    return _bounded(total, text, what)


def _bounded(seconds: float, text: object, what: str) -> float:
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise InputError(f"{what}: {_short(text)} is longer than 100 years (not a duration "
                         "this tool can use)")
    return seconds


def _short(text: object) -> str:
    r = repr(str(text))
    return r if len(r) <= 40 else r[:36] + "…'"


def format_duration(seconds: float) -> str:
    """``0.1`` -> ``100ms``, ``3600`` -> ``1h``, ``86400 * 3650`` -> ``3650d``: the bounds
    in range messages, in the grammar :func:`parse_duration` reads."""
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:g}ms"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def duration_in(text: object, lo: float, hi: float, *, what: str = "duration") -> float:
    """:func:`parse_duration` of ``text``, which must lie within ``[lo, hi]`` seconds; the
    error names ``what``, the value and the range (``interval: '1ms' is out of range
    (100ms to 1h)``)."""
    seconds = parse_duration(str(text), what=what)
    if not lo <= seconds <= hi:
        raise InputError(f"{what}: {_short(text)} is out of range ({format_duration(lo)} to "
                         f"{format_duration(hi)})")
    return seconds


def number_in(value: object, lo: float, hi: float, *, what: str, integer: bool = False,
              lo_open: bool = False) -> float | int:
    """``value`` as a number (an int when ``integer``) within ``[lo, hi]`` (``(lo, hi]``
    with ``lo_open``), else an :class:`InputError` naming ``what`` and the range. A
    boolean, a string, NaN or an infinity is never a number here."""
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:36] + "…"
        raise InputError(f"{what}: {shown} is not {kind} "
                         f"({_range(lo, hi, lo_open)})")
    assert isinstance(value, int | float)  # checked above
    if not integer and not math.isfinite(value):
        raise InputError(f"{what}: {value!r} is not a finite number ({_range(lo, hi, lo_open)})")
    v = float(value) if not integer else value
    if (v <= lo if lo_open else v < lo) or v > hi:
        raise InputError(f"{what}: {value!r} is out of range ({_range(lo, hi, lo_open)})")
    return v


def _range(lo: float, hi: float, lo_open: bool) -> str:
    def g(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    return f"more than {g(lo)} and at most {g(hi)}" if lo_open else f"{g(lo)} to {g(hi)}"


def check_tz(tz: str | None) -> str | None:
    """``tz`` when it names a time zone (None stays None: UTC); an unknown one is an
    :class:`InputError` naming it."""
    if tz is None:
        return None
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InputError(f"--tz {tz}: unknown time zone (use e.g. UTC, Europe/Berlin)") \
            from None
    return tz
