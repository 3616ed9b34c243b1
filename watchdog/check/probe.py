"""Collect the short burst of samples ``watchdog check`` judges, from any source.

* :func:`burst_live` reads a live source (NVML on the wall clock, or the simulator on a
  manual clock) ``ceil(duration / interval)`` times, ``interval`` seconds apart, so at most
  ``duration`` seconds pass between the first and the last reading (one reading when
  ``duration`` is 0). Counter deltas and XIDs that arrive meanwhile are seen.
* :func:`burst_recorded` streams a log and keeps only its last ``duration`` seconds (at least
  its last tick), so a long log costs memory for a few seconds only.

The clock is injected; this module never reads the time itself. Standard library only: it is
on the start-up path that must not import pandas.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from watchdog.clock import Clock
from watchdog.records import DeviceInfo, Sample


@dataclass(slots=True)
class Burst:
    """What a check saw: inventory, per-GPU samples (oldest first) and the judged moment."""

    host: str
    devices: list[DeviceInfo]
    samples: dict[str, list[Sample]]
    end: float
    span: float


def readings(duration: float, interval: float) -> int:
    """Number of readings in a burst: ``ceil(duration / interval)``, at least 1."""
    if duration <= 0:
        return 1
    return max(1, math.ceil(duration / interval - 1e-9))


def burst_live(source, clock: Clock, duration: float, interval: float,
               devices: list[DeviceInfo] | None = None, t0: float | None = None,
               between: Callable[[], object] | None = None) -> Burst:
    """Read ``source`` (a :class:`~watchdog.sources.base.LiveSource`) for one burst.

    Readings are due at ``t0 + k * interval`` (``t0`` defaults to now). ``t0`` may lie in
    the past, e.g. the time before a slow NVML start-up: slots already missed are skipped
    (but there is always a first reading), so the whole check still fits in ``duration``.
    ``devices`` is the inventory if the caller already has it (else ``source.devices()``).
    ``between`` runs once after the first reading when more are due: work that would
    otherwise follow the burst (loading the rule engine) fills the wait for the next slot.
    """
    inventory = list(devices if devices is not None else source.devices())
    out: dict[str, list[Sample]] = {d.uuid: [] for d in inventory}
    t0 = clock.now() if t0 is None else t0
    first: float | None = None
    last = t0
    for k in range(readings(duration, interval)):
        due = t0 + k * interval
        if first is not None and due < clock.now():
            continue  # a missed slot: reading now would run past the budget's end
        clock.sleep_until(due)
        now = clock.now()
        if first is None:
            first = now
        for s in source.sample(now):
            out.setdefault(s.uuid, []).append(s)
        last = now
        if k == 0 and between is not None and readings(duration, interval) > 1:
            between()
    first = last if first is None else first
    return Burst(host=source.host, devices=inventory, samples=out, end=last, span=last - first)


def burst_recorded(host: str, devices: list[DeviceInfo],
                   ticks: Iterable[tuple[float, list[Sample]]], duration: float) -> Burst:
    """The last ``duration`` seconds of a recorded log, streamed from ``ticks``.

    A GPU whose last reading is older than that window keeps no samples, so the judge
    reports it as vanished: it disappeared before the end of the log.
    """
    window: deque[tuple[float, list[Sample]]] = deque()
    end = -math.inf
    for ts, samples in ticks:
        end = max(end, ts)
        window.append((ts, samples))
        while window and window[0][0] < end - duration:
            window.popleft()
    out: dict[str, list[Sample]] = {d.uuid: [] for d in devices}
    for _, samples in window:
        for s in samples:
            out.setdefault(s.uuid, []).append(s)
    if not window:
        return Burst(host=host, devices=list(devices), samples=out, end=0.0, span=0.0)
    return Burst(host=host, devices=list(devices), samples=out, end=end,
                 span=end - window[0][0])
