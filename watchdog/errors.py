"""Errors that reach the user as one line and an exit code, never as a traceback.

Every module raises one of these for problems caused by input, configuration or the
environment; ``watchdog.cli`` prints ``watchdog: error: <message>`` and exits with
``exit_code``. Messages name what is wrong and where (file, line, column, GPU).
"""

from __future__ import annotations

import sys


class WatchdogError(Exception):
    """A problem the user can fix; ``str(err)`` is the whole one-line message."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(WatchdogError):
    """Bad input: a file, a trace, a column mapping, a rule or a config value (exit 2)."""

    exit_code = 2


class SourceUnavailable(WatchdogError):
    """The metric source cannot start: no NVML library, no driver, init failed (exit 3).

    Exit code 3 is UNKNOWN in the Nagios convention ``watchdog check`` follows: the node's
    health could not be judged at all.
    """

    exit_code = 3


def where(path: object, line: int | None = None, column: str | None = None) -> str:
    """Format a location prefix such as ``log.csv:12: column 'power.draw [W]'``."""
    out = str(path)
    if line is not None:
        out += f":{line}"
    if column is not None:
        out += f": column {column!r}"
    return out


def error_line(e: WatchdogError) -> str:
    """``watchdog: error: <message>``, plus the error's ``hint`` (such as "try the
    simulator") only for a person at a terminal, never in a log, a page or a probe's
    output a script reads."""
    from watchdog.escape import line

    hint = getattr(e, "hint", None)
    return line(f"watchdog: error: {e}" + (f" ({hint})" if hint and sys.stderr.isatty()
                                           else ""))
