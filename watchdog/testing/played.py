"""A recording played through the live pipeline, tick by tick, as the agent would see it.

``watchdog replay`` feeds a recording to the detector in blocks; the agent reads one tick
at a time from NVML and goes through :class:`~watchdog.pipeline.live.LivePipeline`
(the live detector, its tick batching, the agent's incident bookkeeping). The two must
say the same: :func:`play_live` runs a recording down the agent's path, on a
:class:`~watchdog.clock.ManualClock` set to each recorded tick's time, with the same
detector :mod:`watchdog.service.agent` builds (``mode="live"``), so a labelled real
recording tests both paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from typing import TYPE_CHECKING

from watchdog.clock import ManualClock
from watchdog.incident import Incident
from watchdog.records import DeviceInfo, Sample

if TYPE_CHECKING:
    from watchdog.detect import Detector, Rule
    from watchdog.sources.base import LiveSource
    from watchdog.sources.replay.frame import Recording
    from watchdog.store.agent import AgentStore


class PlayedSource:
    """A :class:`~watchdog.sources.base.LiveSource` that answers ``sample(now)`` with the
    recorded tick at ``now`` (the caller's clock walks the recording's timestamps)."""

    def __init__(self, recording: Recording) -> None:
        self.host: str = recording.host
        self._devices: list[DeviceInfo] = list(recording.devices())
        self._ticks: dict[float, list[Sample]] = dict(recording.ticks())

    def times(self) -> list[float]:
        """Every recorded tick's time (POSIX s), in order."""
        return sorted(self._ticks)

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def sample(self, now: float) -> list[Sample]:
        return [replace(s, ts=now) for s in self._ticks.get(now, [])]

    def close(self) -> None:
        """Nothing to release."""


def play_live(recording: Recording, rules: Sequence[Rule], *, host: str | None = None,
              store: AgentStore | None = None) -> list[Incident]:
    """Every incident the agent's live pipeline raises over ``recording`` (with
    ``rules``, no model, no alerting), in the order they fired, as they stand at the
    recording's end; ``store`` an :class:`~watchdog.store.agent.AgentStore` whose learned
    state the agent restores first (None: a fresh node)."""
    from watchdog.pipeline.core import build_detector
    from watchdog.pipeline.live import LivePipeline

    source = PlayedSource(recording)
    times = source.times()
    if not times:
        return []
    clock = ManualClock(start=times[0])
    seen: dict[int, Incident] = {}

    def note(_transition: str, inc: Incident) -> None:
        seen.setdefault(id(inc), inc)

    def make(src: LiveSource) -> Detector:
        return build_detector(rules, host=host or src.host, devices=src.devices(),
                              mode="live")

    interval = _interval(times)
    pipe = LivePipeline(lambda _now: source, make, clock, spec="played", interval=interval,
                        store=store, listeners=[note], host=host or recording.host)
    for t in times:
        clock.sleep_until(t)
        pipe.tick()
    assert pipe.detector is not None  # the source opened
    pipe.detector.flush_ticks()  # the ticks the live detector still batches
    for transition, inc in pipe.detector.drain():
        note(transition, inc)
    pipe.close(drain_s=0.0)
    return sorted(seen.values(), key=lambda i: (i.fired_at or i.started_at))


def _interval(times: Sequence[float]) -> float:
    """The recording's median tick spacing (s), 1 s for a single tick."""
    if len(times) < 2:
        return 1.0
    steps = sorted(b - a for a, b in pairwise(times))
    return max(steps[len(steps) // 2], 1e-3)
