"""A command sampling a live source for a while (``record``, ``train --source nvml``): the
ticks on the monotonic clock, and SIGTERM or SIGINT ending them cleanly.

Why one loop: both commands read the GPUs for up to hours before they write anything
(a recording's last chunk, a model), and both must survive what the daemon survives. A
wall-clock step (NTP, an admin) must neither stretch nor cut the sampling nor put
samples out of order, so the ticks are read from :class:`~watchdog.clock.WallClock`
(the start's wall time plus monotonic time since). A stop from ``timeout``, ``kill``,
systemd or Slurm (SIGTERM), or Ctrl-C, also in a script's background job, which inherits
SIGINT ignored so that Python's KeyboardInterrupt never comes, ends the sampling, and the
command goes on with what it has.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import signal

    from watchdog.clock import Clock


class Stopped(Exception):
    """Raised by :class:`Stop`'s handler, only while the loop sleeps between ticks."""


class Stop:
    """SIGTERM and SIGINT, caught while in ``with``: :attr:`signal` names the one that
    came. A signal during a read or a write only sets it (the loop stops after that
    sample, nothing is torn); during the sleep between ticks it ends the sleep at once.
    Installed only on the main thread (where Python runs signal handlers); elsewhere
    Ctrl-C stays a KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signal = ""
        self._sleeping = False
        self._old: dict[int, signal._HANDLER] = {}

    def __enter__(self) -> Stop:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _on_signal(self, signum: int, _frame: object) -> None:
        import signal

        self.signal = signal.Signals(signum).name
        if self._sleeping:
            raise Stopped

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Around the sleep between ticks: a signal (or one that came during the read
        just before) ends it at once."""
        self._sleeping = True
        try:
            if self.signal:
                raise Stopped
            yield
        finally:
            self._sleeping = False


def ticks(clock: Clock, start: float, duration: float, interval: float, stop: Stop
          ) -> Iterator[float]:
    """Tick times ``start``, ``start + interval``, … while ``< start + duration`` on
    ``clock``, sleeping between them, until ``stop`` catches a signal. A read slower
    than ``interval`` (the caller's, between two ticks) skips the ticks missed rather
    than bunching them."""
    t = start
    while t < start + duration and not stop.signal:
        yield t
        t += interval
        now = clock.now()
        if now > t:  # fell behind: skip to the next tick still ahead
            t += interval * ((now - t) // interval + 1)
        try:
            with stop.waiting():
                clock.sleep_until(t)
        except Stopped:
            return
