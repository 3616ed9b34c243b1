"""Parsing of human-written quantities: durations like ``90s``, ``10m``, ``1h30m``, ``0.5s``,
and time-zone names.

Used by every command option and config value that takes a duration or a zone, so the
spelling and the error are the same everywhere. Standard library only (on the
``watchdog check`` start-up path).
"""

from __future__ import annotations

import re

from watchdog.errors import InputError

# The one duration grammar: options, config values, rule `for:` and the windows inside
# rule conditions (watchdog.detect.lang tokenises DURATION_PATTERN and calls
# parse_duration). A number and a unit, repeated: 90s, 5m, 1h30m, 0.5s, 250ms, 2d.
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_UNIT = UNITS
DURATION_PATTERN = r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+"
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in ``text`` (``"90"`` = 90 s, ``"1m30s"``, ``"0.2s"``, ``"250ms"``).

    Raises InputError naming ``what`` and the text on anything else.
    """
    t = str(text).strip().lower()
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if value < 0 or value != value or value == float("inf"):
            raise InputError(f"{what}: {text!r} is not a duration")
        return value
    pos, total = 0, 0.0
    for m in _PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(t) or not t:
        raise InputError(f"{what}: {text!r} is not a duration (use e.g. 30s, 5m, 1h30m)")
    return total


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
