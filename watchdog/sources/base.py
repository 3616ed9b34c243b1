"""What a metric source is.

Live sources (``nvml``, ``sim``) are asked for one reading of every GPU at a time the
caller chooses (``sample(now)``); the caller owns the clock. Recorded sources (replay
logs, recordings) carry their own timestamps and are read as a whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from watchdog.records import DeviceInfo, Sample


@runtime_checkable
class LiveSource(Protocol):
    """A source read tick by tick on an injected clock."""

    host: str

    def devices(self) -> list[DeviceInfo]:
        """Inventory of the GPUs this source reports, by index."""
        ...

    def sample(self, now: float) -> list[Sample]:
        """One reading of every GPU at time ``now`` (POSIX seconds)."""
        ...

    def close(self) -> None:
        """Release resources (threads, NVML handles). Idempotent."""
        ...


@runtime_checkable
class RecordedSource(Protocol):
    """A source whose samples carry their own timestamps (a log or a recording)."""

    host: str

    def devices(self) -> list[DeviceInfo]:
        ...

    def ticks(self) -> Iterator[tuple[float, list[Sample]]]:
        """Samples grouped by timestamp, in time order: ``(ts, [one Sample per GPU])``."""
        ...
