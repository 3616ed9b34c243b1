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

    def real(self) -> float:
        """Real time on the same timeline (what silences, retries and outbox rows use):
        ``now()`` itself but for a simulated node running faster than real time."""
        ...

    def sleep_until(self, t: float) -> None:
        """Block (or, for a manual clock, jump) until time ``t``."""
        ...


def elapsed() -> float:
    """Seconds on the kernel's boot-time clock: monotonic (a wall-clock step never moves
    it) and, unlike ``time.monotonic``, still counting while the machine is suspended."""
    return time.clock_gettime(_BOOTTIME)


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class WallClock:
    """The agent's clock: the wall-clock time when it started plus the time elapsed since,
    counted on :func:`elapsed`. ``speed`` > 1 runs a simulated node faster.

    Why not ``time.time()``: the detector's windows and ``for:`` durations need a time that
    never goes back and never jumps. A wall-clock step while the agent runs (NTP, an
    admin, a VM restored) therefore moves neither the schedule nor the timestamps;
    :meth:`offset` says how far the system clock now differs (``watchdog status`` shows it)
    and the next start takes the system clock again. The unit starts after
    ``time-sync.target`` so that the start time is right in the first place.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        self._t0_real = time.time()
        self._t0_mono = elapsed()

    def now(self) -> float:
        return self._t0_real + (elapsed() - self._t0_mono) * self.speed

    def real(self) -> float:
        """Real time on the same timeline (speed 1): for silences, retries, outbox rows."""
        return self._t0_real + (elapsed() - self._t0_mono)

    def offset(self) -> float:
        """How far the system clock is from this timeline now (s; positive: the system
        clock is ahead, e.g. stepped forward since the start)."""
        return time.time() - self.real()

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

    def real(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, float(t))

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` and return the new time."""
        self.t += seconds
        return self.t
