"""Injected time. No module reads the wall clock on its own; it is handed a ``Clock``.

Times are POSIX seconds (float, UTC). Live mode uses :class:`WallClock`; replay, the
simulator running faster than real time, and tests use :class:`ManualClock`.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that says what time it is and can wait until a later time."""

    def now(self) -> float:
        """Current time, POSIX seconds."""
        ...

    def sleep_until(self, t: float) -> None:
        """Block (or, for a manual clock, jump) until time ``t``."""
        ...


class WallClock:
    """The real clock (``time.time``); ``speed`` > 1 runs a simulated node faster.

    With ``speed`` = 60, one real second is one simulated minute: ``now()`` advances 60
    seconds per real second, starting from the real time at construction.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._t0_real = time.time()
        self._t0_mono = time.monotonic()

    def now(self) -> float:
        return self._t0_real + (time.monotonic() - self._t0_mono) * self.speed

    def sleep_until(self, t: float) -> None:
        delay = (t - self.now()) / self.speed
        if delay > 0:
            time.sleep(delay)


class ManualClock:
    """A clock that only moves when told to: ``sleep_until`` jumps straight there."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, float(t))

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` and return the new time."""
        self.t += seconds
        return self.t
