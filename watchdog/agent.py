"""The live agent: one tick = sample every GPU, feed the detector, hand transitions on.

This is the same detector code ``watchdog replay`` runs; only the clock differs. The
scheduler (APScheduler, see :mod:`watchdog.commands.run`) calls :meth:`Agent.tick` every
``interval`` seconds of the injected clock; tests call it directly on a ManualClock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from watchdog.clock import Clock
from watchdog.incident import Incident
from watchdog.sources.base import LiveSource

log = logging.getLogger(__name__)

Notify = Callable[[str, Incident], None]


@dataclass
class TickStats:
    """Counters the agent keeps (exposed for status output and tests)."""

    ticks: int = 0
    samples: int = 0
    source_errors: int = 0
    notifications: int = 0


class Agent:
    """Glue between a live source, the detector and the notifiers.

    ``notifiers`` are called with ``("firing" | "resolved", incident)`` in time order. A
    source that raises on one tick is logged and retried on the next; it never stops the
    agent (a wedged driver is reported by the source as a per-GPU error, not a hang).
    """

    def __init__(self, source: LiveSource, detector, clock: Clock,  # type: ignore[no-untyped-def]
                 notifiers: Sequence[Notify]) -> None:
        self.source = source
        self.detector = detector
        self.clock = clock
        self.notifiers = list(notifiers)
        self.stats = TickStats()
        # one tick at a time: the detector's state is not for two threads at once (a
        # scheduler thread and a direct call, or a tick that overran its interval)
        self._lock = threading.Lock()

    def tick(self) -> list[tuple[str, Incident]]:
        """Sample once at ``clock.now()``, detect, notify; returns the transitions sent.

        Ticks never overlap: a call made while one runs waits for it."""
        with self._lock:
            return self._tick()

    def _tick(self) -> list[tuple[str, Incident]]:
        now = self.clock.now()
        try:
            samples = self.source.sample(now)
        except Exception as e:  # noqa: BLE001 - a bad tick must not kill the daemon
            self.stats.source_errors += 1
            log.error("sampling failed at %.3f: %s: %s", now, type(e).__name__, e)
            return []
        self.stats.ticks += 1
        self.stats.samples += len(samples)
        self.detector.feed_tick(now, samples)
        changes = self.detector.drain()
        for state, incident in changes:
            for notify in self.notifiers:
                try:
                    notify(state, incident)
                except Exception as e:  # noqa: BLE001 - one broken notifier must not stop others
                    log.error("notifier %r failed: %s: %s", notify, type(e).__name__, e)
            self.stats.notifications += 1
        return changes

    def close(self) -> None:
        self.source.close()
