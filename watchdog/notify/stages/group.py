"""Stage 5, group: one notification per group and sink, on the group's timers.

A group is a host (and its Slurm job where known): one notification lists every alert of
the group. A new group waits ``group_wait``, later changes ``group_interval``; a group
that still fires and did not change is sent again after ``repeat_interval`` (and a sink
that wants to hear more often, Alertmanager, after its ``resend_interval``). A muted alert
is left out while it fires, unless the sink was told it fires: then its resolve goes out.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import replace

from watchdog.notify.base import Alert, Notification, Reason
from watchdog.notify.config import NotifyConfig
from watchdog.notify.stages.state import AlertState, GroupState, Sent


class GroupStage:
    """The groups as each sink saw them (``groups``: (group key, sink) -> state)."""

    def __init__(self, cfg: NotifyConfig) -> None:
        self.cfg = cfg
        self.groups: dict[tuple[str, str], GroupState] = {}

    def keys(self) -> set[str]:
        """Every group key some sink still has a state for."""
        return {g for g, _ in self.groups}

    def tick(self, g: str, sink: str, members: list[AlertState], muted: set[str],
             now: float, resend: float | None) -> Notification | None:
        """The notification group ``g`` owes ``sink`` now (``members``: its alerts routed
        to the sink), or None."""
        gs = self.groups.get((g, sink))
        sent = gs.sent if gs else {}
        view: dict[str, Alert] = {}
        for a in members:
            fp = a.alert.fingerprint
            told_firing = sent.get(fp, [None])[0] == "firing"
            if a.state == "resolved":
                if told_firing and self.cfg.send_resolved:
                    view[fp] = a.alert
            elif fp not in muted or told_firing:
                view[fp] = replace(a.alert, status="firing", resolved_at=None)
        if not view and not sent:
            if gs is not None:
                gs.write = "delete"
            return None
        if gs is None:
            gs = self.groups[(g, sink)] = GroupState(f"{g}#{uuidlib.uuid4().hex[:8]}", now)
        current: dict[str, Sent] = {fp: [a.status, list(a.gpus)] for fp, a in view.items()}
        changed = tuple(sorted(fp for fp in current if current[fp] != sent.get(fp)))
        gone = [fp for fp in sent if fp not in current]  # resolved but send_resolved off
        firing = any(a.status == "firing" for a in view.values())
        reason = self._reason(gs, changed, firing, now, resend)
        if reason is None:
            if gone and not changed:
                for fp in gone:
                    sent.pop(fp, None)
                gs.write = "save"
            return None
        alerts = tuple(sorted(view.values(), key=lambda a: (a.status != "firing", a.kind,
                                                              a.gpus)))
        n = Notification(id=uuidlib.uuid4().hex, sink=sink, group_key=gs.instance,
                         reason=reason, created_at=now, alerts=alerts, changed=changed)
        gs.sent = {fp: v for fp, v in current.items() if v[0] == "firing"}
        gs.last_sent_at = now
        # everything resolved: the group is over, the next incident opens a new one
        gs.write = "save" if gs.sent else "delete"
        return n

    def _reason(self, gs: GroupState, changed: tuple[str, ...], firing: bool, now: float,
                resend: float | None) -> Reason | None:
        """Why the group is due now, or None: its wait after a change, or a repeat."""
        if changed:
            if gs.last_sent_at is None:
                return "new" if now >= gs.created_at + self.cfg.group_wait else None
            if now >= gs.last_sent_at + self.cfg.group_interval:
                return "update" if firing else "resolved"
            return None
        if firing and gs.last_sent_at is not None:
            if now >= gs.last_sent_at + self.cfg.repeat_interval:
                return "repeat"
            if resend and now >= gs.last_sent_at + resend:
                return "refresh"
        return None
