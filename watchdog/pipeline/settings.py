"""What a running agent may change on SIGHUP, owned by one object.

The sampling interval and the rules are read here by every part that depends on them (the
daemon's ticker, the live pipeline's timing, the detector it builds, the alerting's rule
lookup, the anomaly model's windows), never copied. A reload calls :meth:`Settings.update`
once; every subscriber hears of the change in the same call, so no part can keep an old
interval (the anomaly model once did: its windows kept the old step after a reload).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from watchdog.detect import Rule
from watchdog.units import RETENTION_S

Listener = Callable[["Settings", frozenset[str]], None]


class Settings:
    """``interval``: sampling period in seconds of the agent's clock; ``rules``: the
    :class:`~watchdog.detect.loader.RuleSet` in force; ``retention_s``: how long resolved
    incidents (and learned levels of GPUs no longer seen) stay in the state database
    (the config's ``retention:``)."""

    def __init__(self, interval: float, rules: Sequence[Rule] = (),
                 retention_s: float = RETENTION_S) -> None:
        self.interval = interval
        self.rules = rules
        self.retention_s = retention_s
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(settings, changed_names)`` after every :meth:`update` that
        changed something."""
        self._listeners.append(listener)

    def update(self, *, interval: float | None = None, rules: Sequence[Rule] | None = None,
               retention_s: float | None = None) -> frozenset[str]:
        """Apply new values; returns the names that changed (after telling everyone)."""
        changed = set()
        if retention_s is not None and retention_s != self.retention_s:
            self.retention_s = retention_s
            changed.add("retention")
        if interval is not None and interval != self.interval:
            self.interval = interval
            changed.add("interval")
        if rules is not None:
            self.rules = rules
            changed.add("rules")
        done = frozenset(changed)
        if done:
            for listener in self._listeners:
                listener(self, done)
        return done

    def rule_info(self, name: str) -> tuple[str, str | None]:
        """``(scope, runbook)`` of the rule ``name`` in force (``("node", None)`` for a
        name no rule has: the agent's own incidents)."""
        for r in self.rules:
            if r.name == name:
                return r.scope, getattr(r, "runbook", None)
        return "node", None
