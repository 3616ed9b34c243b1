"""Stage 4, route: which alerts each sink hears of, by severity and kind (the config's
``routes``; default: every sink). An alert about a sink that is down goes to the others
(its ``sink`` label: :meth:`~watchdog.notify.config.NotifyConfig.sinks_for`)."""

from __future__ import annotations

from collections.abc import Iterable

from watchdog.notify.config import NotifyConfig
from watchdog.notify.stages.state import AlertState


class RouteStage:
    """Selects the alerts routed to one sink."""

    def __init__(self, cfg: NotifyConfig) -> None:
        self.cfg = cfg

    def select(self, alerts: Iterable[AlertState], sink: str) -> list[AlertState]:
        """The alerts of ``alerts`` that go to ``sink``, in order."""
        return [a for a in alerts
                if sink in self.cfg.sinks_for(a.alert.severity, a.alert.kind,
                                              down=a.alert.labels.get("sink"))]
