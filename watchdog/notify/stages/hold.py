"""Stage 2, hold: an alert's state (firing, resolving, resolved) and how long a resolve
is held.

A resolve is held ``resolve_hold``; a re-fire inside the hold continues the same alert
(no new page, no resolve). An alert that fired ``flap_count`` times within
``flap_window`` is flapping and its resolve is held ``flap_hold``: an incident firing and
clearing every minute for an hour is one page and, once it stays clear, one resolve. A
job-wide alert's resolve is held further while the fleet says another node of the job is
still in it (``job_clear``, the agent's view of Prometheus: ``job: {prometheus: URL}``),
so the job's one PagerDuty incident resolves with its last node, at most
:data:`FLEET_HOLD_MAX_S` later. After a restart every alert that was firing is held
``restart_grace`` for the detector to raise it again (:meth:`HoldStage.restored`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from watchdog.incident import Incident
from watchdog.notify.base import Alert
from watchdog.notify.config import NotifyConfig
from watchdog.notify.stages.identity import plain
from watchdog.notify.stages.state import AlertState

log = logging.getLogger("watchdog.notify")

#: (kind, job id) -> True: no other node of the job is in it; False: some are; None: unknown
JobClear = Callable[[str, str], bool | None]
FLEET_HOLD_MAX_S = 3600.0  # a job-wide resolve is never held longer for the fleet
FLEET_RECHECK_S = 15.0  # a resolve held for the fleet is looked at again this often


class HoldStage:
    """Moves the alerts of ``alerts`` (fingerprint -> state, shared with the policy)
    between firing, resolving and resolved."""

    def __init__(self, cfg: NotifyConfig, alerts: dict[str, AlertState],
                 job_clear: JobClear | None = None) -> None:
        self.cfg = cfg
        self.alerts = alerts
        self.job_clear = job_clear
        self._fleet_held: set[str] = set()

    def restored(self, fp: str, alert: Alert, state: str, group: str, fires: list[float],
                 now: float) -> None:
        """An alert read back after a restart: a resolved one stays resolved; one that was
        firing is held ``restart_grace`` for the detector to raise it again."""
        if state == "resolved":
            self.alerts[fp] = AlertState(alert, "resolved", group, None, fires, dirty=False)
        else:
            self.alerts[fp] = AlertState(alert, "resolving", group,
                                         now + self.cfg.restart_grace, fires)

    def fire(self, fp: str, alert: Alert, group: str, now: float) -> None:
        """``fp`` fires (again): a re-fire of a held alert continues it."""
        cur = self.alerts.get(fp)
        fires = [t for t in (cur.fires if cur else []) if now - t <= self.cfg.flap_window]
        if cur is not None and cur.state == "resolving":
            alert = replace(alert, started_at=cur.alert.started_at,
                            fired_at=cur.alert.fired_at)
        self.alerts[fp] = AlertState(alert, "firing", group, None, [*fires, now])

    @staticmethod
    def update(cur: AlertState, alert: Alert) -> None:
        """A firing alert changed (GPUs joined or left): it keeps its times."""
        cur.alert = replace(alert, started_at=cur.alert.started_at,
                            fired_at=cur.alert.fired_at)
        cur.dirty = True

    def resolve(self, cur: AlertState, inc: Incident, now: float) -> None:
        """The detector resolved it: held ``resolve_hold`` (``flap_hold`` if flapping)."""
        flapping = len(cur.fires) >= self.cfg.flap_count
        hold = self.cfg.flap_hold if flapping else self.cfg.resolve_hold
        cur.alert = replace(cur.alert, resolved_at=inc.resolved_at or now,
                            evidence=plain(inc.evidence) or cur.alert.evidence)
        cur.state, cur.hold_until, cur.dirty = "resolving", now + hold, True
        if self.job_clear is not None and cur.alert.job_id and \
                cur.alert.fingerprint.startswith("job-"):  # ask now: known by the hold's end
            self.job_clear(cur.alert.kind, cur.alert.job_id)
        if flapping:
            log.info("%s on %s is flapping (%d firings in %.0f min): its resolve is "
                     "held %.0f min", inc.kind, inc.host, len(cur.fires),
                     self.cfg.flap_window / 60, hold / 60)

    def advance(self, now: float) -> None:
        """Resolving alerts whose hold is over (and whose fleet does not hold them)
        become resolved."""
        for a in self.alerts.values():
            if a.state == "resolving" and a.hold_until is not None and now >= a.hold_until:
                if self._fleet_holds(a, now):
                    continue
                self._fleet_held.discard(a.alert.fingerprint)
                a.state, a.hold_until, a.dirty = "resolved", None, True
                a.alert = replace(a.alert, status="resolved",
                                  resolved_at=a.alert.resolved_at or now)

    def _fleet_holds(self, a: AlertState, now: float) -> bool:
        """Hold a job-wide alert's resolve while other nodes of its job are still in it
        (the fleet's answer; unknown = do not hold)."""
        al = a.alert
        if self.job_clear is None or not al.job_id or not al.fingerprint.startswith("job-") \
                or now - (al.resolved_at or now) >= FLEET_HOLD_MAX_S:
            return False
        if self.job_clear(al.kind, al.job_id) is not False:  # never raises (FleetView)
            return False
        a.hold_until, a.dirty = now + FLEET_RECHECK_S, True
        if al.fingerprint not in self._fleet_held:
            self._fleet_held.add(al.fingerprint)
            log.info("%s of job %s cleared here; its resolve waits for the job's other "
                     "nodes (Prometheus still shows some in it)", al.kind, al.job_id)
        return True
