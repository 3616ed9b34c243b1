"""A sweep: several GPUs read one after another on one lane, one thread hand-off per tick.

Handing each GPU's read to its own lane costs a thread wake-up per GPU per tick, and on a
small node the woken lanes then queue for the interpreter lock one after another anyway:
measured on the fake NVML (2 vCPUs, 8 GPUs), sampling took 2.9 ms of CPU a tick with one
hand-off per GPU and 1.8 ms with all eight read in turn on the calling thread. So while no
GPU has ever wedged, :class:`~watchdog.sources.nvml.source.NvmlSource` reads up to
``SWEEP_GPUS`` GPUs as one job on a sweep lane. Every NVML call still runs under its own
deadline: each call marks the sweep's lane (``DeviceReader.runs_on``), and the waiter
raises :class:`~watchdog.sources.nvml.deadline.Wedged` when one call overruns.

When a call wedges, the waiter *abandons* the sweep: the GPU inside the stuck call stays
held by the sweep's thread (skipped, with an error naming the call, until it returns),
the GPUs the sweep had not reached are read at once on their own lanes, and from then on
every GPU of that sweep is read on its own lane, as before sweeps existed. The wall time of
a tick grows (the sweep's GPUs are read in turn, not side by side), which at most eight
GPUs and one tick a second is tens of milliseconds on real drivers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from watchdog.sources.nvml.deadline import Job, Lane
from watchdog.sources.nvml.reader import DeviceReader

# GPUs per sweep: one hand-off per tick reads 8 GPUs (a whole HGX node); larger counts
# get one sweep per 8, read side by side, so a tick's wall time stays that of 8 GPUs.
SWEEP_GPUS = 8


G = TypeVar("G", bound=DeviceReader)


class Sweep(Generic[G]):
    """Read ``gpus`` (device readers with a ``read_job(slow)``) in turn on one lane."""

    def __init__(self, name: str, gpus: list[G]) -> None:
        self.lane = Lane(name)
        self.gpus = gpus
        self._lock = threading.Lock()
        self._current: G | None = None  # the GPU the sweep's thread is reading now
        self._abandoned = False
        self.dead = False  # abandoned: its GPUs are read on their own lanes from now on
        for g in gpus:
            g.runs_on = self.lane

    def submit(self, gpus: list[G], read: Callable[[G], object],
               results: dict[int, object]) -> Job:
        """Start ``read(g)`` for each of ``gpus`` (a subset of this sweep's, in order);
        each GPU's outcome (the result, or the exception it raised) lands in ``results`` by
        index as soon as it is known, so a wedge later in the sweep loses nothing before."""
        return self.lane.submit(lambda: self._run(gpus, read, results))

    def _run(self, gpus: list[G], read: Callable[[G], object],
             results: dict[int, object]) -> None:
        try:
            for g in gpus:
                with self._lock:
                    if self._abandoned:
                        return
                    self._current = g
                try:
                    results[g.index] = read(g)
                except Exception as e:  # noqa: BLE001 - the waiter turns it into the sample
                    results[g.index] = e
        finally:
            with self._lock:
                self._current = None

    def abandon(self) -> G | None:
        """After a wedge: stop at the next GPU and hand every GPU back to its own lane;
        returns the GPU the sweep's thread is still reading (held until it returns)."""
        with self._lock:
            self._abandoned = True
            held = self._current
        self.dead = True
        for g in self.gpus:
            if g is not held:
                g.runs_on = g.lane
        return held


def sweeps_for(gpus: list[G], size: int = SWEEP_GPUS) -> list[Sweep[G]]:
    """One sweep per ``size`` GPUs of ``gpus`` (in index order); none for a single GPU,
    which gains nothing (one hand-off either way)."""
    if len(gpus) < 2:
        return []
    return [Sweep(f"nvml-sweep{k // size}", gpus[k:k + size])
            for k in range(0, len(gpus), size)]
