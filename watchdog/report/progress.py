"""Progress on a terminal, never in machine output.

``watchdog replay`` shows a tqdm bar on stderr only when stderr is a TTY and ``--json``
was not asked for: a bar in a log file or a pipe is noise, and ``--json`` promises one
JSON object and nothing else.
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from tqdm import tqdm


def should_show(json_mode: bool, stream: IO[str] | None = None) -> bool:
    """True when a progress bar belongs on ``stream`` (default stderr)."""
    if json_mode:
        return False
    s = sys.stderr if stream is None else stream
    isatty = getattr(s, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """Count rows processed; a tqdm bar when ``enabled``, otherwise a no-op.

    ``total`` and every ``update`` are in rows of the replay frame.
    """

    def __init__(self, total: int, desc: str, enabled: bool,
                 stream: IO[str] | None = None) -> None:
        self._bar: tqdm[None] | None = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="row", unit_scale=True,
                             leave=False, file=sys.stderr if stream is None else stream)

    def set_total(self, total: int) -> None:
        """A better estimate of the total (a log read in parts learns its row count)."""
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def update(self, rows: int) -> None:
        if self._bar is not None:
            self._bar.update(rows)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Terminal:
    """What ``watchdog replay`` shows a person (the pipeline's ``Feedback``): a bar when
    ``show`` (a terminal, not ``--json``), each warning once on stderr."""

    def __init__(self, show: bool) -> None:
        self.show = show

    def progress(self, total: int, name: str) -> Progress:
        return Progress(total, name, self.show)

    def warn(self, line: str) -> None:
        """One warning line; what a log put in it (a column's name) is shown escaped."""
        from watchdog.escape import line as one_line

        print(one_line(f"watchdog: warning: {line}"), file=sys.stderr)
