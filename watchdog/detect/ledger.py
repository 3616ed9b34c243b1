"""The detector's incident bookkeeping: every incident that fired, and the transitions
not drained yet.

The rule runner (:mod:`rules_run`) reports each incident as it fires and each resolution
(data time, s); the detector hands them out in time order (``Detector.drain``) and keeps
the incidents (``Detector.incidents``) until a long-running daemon forgets the resolved
ones (``Detector.forget_resolved``: the state database has the history).
"""

from __future__ import annotations

from collections.abc import Mapping

from watchdog.incident import Incident


class Ledger:
    """Incidents and pending transitions; ``order`` ranks rules (their evaluation order)
    to sort incidents that start and fire at the same time."""

    def __init__(self, order: Mapping[str, int]) -> None:
        self._order = order
        self._incidents: list[Incident] = []
        self._transitions: list[tuple[float, str, Incident]] = []

    def fired(self, inc: Incident) -> Incident:
        """A new incident (firing at ``inc.fired_at``); returns it."""
        self._incidents.append(inc)
        self._transitions.append((float(inc.fired_at or 0.0), "firing", inc))
        return inc

    def resolved(self, t: float, inc: Incident) -> None:
        """``inc`` resolved at data time ``t`` (s)."""
        inc.resolved_at = t
        self._transitions.append((t, "resolved", inc))

    def incidents(self) -> list[Incident]:
        """Every incident kept, by ``started_at`` (then firing time, rule order, GPU)."""
        return sorted(self._incidents, key=self._sort_key)

    def drain(self) -> list[tuple[str, Incident]]:
        """Transitions since the last drain, in time order: ("firing"|"resolved", inc)."""
        out = sorted(self._transitions, key=lambda t: t[0])
        self._transitions = []
        return [(what, inc) for _, what, inc in out]

    def forget_resolved(self) -> int:
        """Drop resolved incidents; returns how many."""
        keep = [inc for inc in self._incidents if inc.resolved_at is None]
        n = len(self._incidents) - len(keep)
        self._incidents = keep
        return n

    def _sort_key(self, inc: Incident) -> tuple[float, float, int, int]:
        return (inc.started_at, inc.fired_at or 0.0, self._order.get(inc.rule, 0),
                int(inc.gpus[0]) if inc.gpus else -1)
