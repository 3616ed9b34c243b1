"""Notification policy: incidents in, notifications (one per group and sink) out.

The policy composes five stages, in the order Alertmanager's notify pipeline runs them
(each one object with one role and its own tests, :mod:`watchdog.notify.stages`):

1. **Identity** (:class:`~.stages.identity.IdentityStage`): each incident's fingerprint
   and job, fixed when it is first seen; a job-wide kind gets the job's fingerprint.
2. **Hold** (:class:`~.stages.hold.HoldStage`): resolves held, flapping damped, a
   job-wide resolve held for the fleet, firing alerts held after a restart.
3. **Mute** (:class:`~.stages.mute.MuteStage`): inhibition and silences.
4. **Route** (:class:`~.stages.route.RouteStage`): by severity and kind to named sinks.
5. **Group** (:class:`~.stages.group.GroupStage`): one notification per group and sink on
   the group's timers (``group_wait``, ``group_interval``, ``repeat_interval``).

:meth:`Policy.observe` runs the first two on the detector's transitions;
:meth:`Policy.tick` advances the holds and runs mute, route and group for every group
and sink. All timers run on the injected clock. Everything decided in a tick is written
in one transaction with the outbox rows (see :mod:`.store`), like Alertmanager's
notification log: a crash re-notifies rather than loses.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping

from watchdog.incident import Incident
from watchdog.notify import outbox
from watchdog.notify import store as st
from watchdog.notify.base import Notification
from watchdog.notify.config import NotifyConfig
from watchdog.notify.stages.group import GroupStage
from watchdog.notify.stages.hold import FLEET_HOLD_MAX_S, HoldStage, JobClear
from watchdog.notify.stages.identity import IdentityStage, JobOf, RuleInfo
from watchdog.notify.stages.mute import MuteStage
from watchdog.notify.stages.route import RouteStage
from watchdog.notify.stages.state import AlertState, GroupState
from watchdog.store.store import Store

log = logging.getLogger("watchdog.notify")

__all__ = ["FLEET_HOLD_MAX_S", "AlertState", "GroupState", "JobClear", "JobOf", "Policy",
           "RuleInfo"]


class Policy:
    """Turns detector transitions into outbox rows. Not thread-safe: the tick thread only.

    ``job_of`` (the agent's job tracker) and ``job_clear`` (the fleet's view, ``job:
    {prometheus: URL}``) are optional: without them no alert is job-wide."""

    def __init__(self, cfg: NotifyConfig, db: Store, host: str | None,
                 rule_info: RuleInfo, now: float,
                 wall: Callable[[], float] = time.time, *, job_of: JobOf | None = None,
                 job_clear: JobClear | None = None) -> None:
        self.cfg = cfg
        self.db = db
        db.migrate("notify", st.STEPS)
        db.migrate("notify_dropped", outbox.STEPS)
        self.wall = wall  # silences and outbox rows: real time, not a simulated clock
        self.host = host
        self.alerts: dict[str, AlertState] = {}
        self.identity = IdentityStage(cfg, rule_info, job_of)
        self.hold = HoldStage(cfg, self.alerts, job_clear)
        self.mute = MuteStage(cfg, db)
        self.route = RouteStage(cfg)
        self.group = GroupStage(cfg)
        self.groups = self.group.groups
        self.dropped = 0  # notifications a full outbox merged away or dropped (this run)
        self._load(now)

    # --- restart ---------------------------------------------------------------------------
    def _load(self, now: float) -> None:
        """Pick up where the last run stopped. Stored times ahead of ``now`` (a simulated
        node starting over, a wall clock stepped back) are clamped to ``now``."""
        alerts, groups = self.db.run(lambda c: (
            c.execute("SELECT fp, group_key, doc, state, hold_until, fires FROM "
                      "notify_alerts").fetchall(),
            c.execute("SELECT group_key, sink, created_at, last_sent_at, sent FROM "
                      "notify_groups").fetchall()))
        for fp, g, doc, state, _hold, fires in alerts:
            times = [min(t, now) for t in json.loads(fires)]
            self.hold.restored(fp, st.alert_from_json(doc), state, g, times, now)
        for g, sink, created, last, sent in groups:
            d = json.loads(sent)
            inst = d.pop("__instance__", g)
            self.groups[(g, sink)] = GroupState(
                inst, min(created, now), None if last is None else min(last, now), d, "clean")
        held = sum(1 for a in self.alerts.values() if a.state == "resolving")
        if held:
            log.info("%d alert(s) were firing when the agent stopped: held %.0f s for "
                     "the detector to confirm them", held, self.cfg.restart_grace)

    # --- incidents in ----------------------------------------------------------------------
    def observe(self, changes: list[tuple[str, Incident]], now: float) -> None:
        """Take the detector's transitions (``firing``, ``updated``, ``resolved``)."""
        for what, inc in changes:
            fp = self.identity.fingerprint(inc)
            cur = self.alerts.get(fp)
            if what == "firing":
                self.hold.fire(fp, self.identity.alert(inc, fp), self.identity.group(inc),
                               now)
            elif cur is None:
                continue  # an update or resolve of an incident this policy never saw fire
            elif what == "updated":
                self.hold.update(cur, self.identity.alert(inc, fp))
            elif what == "resolved":
                self.hold.resolve(cur, inc, now)
            if what == "resolved":
                self.identity.forget(inc)

    # --- notifications out ------------------------------------------------------------------
    def tick(self, now: float, sinks: Mapping[str, float | None]) -> list[Notification]:
        """Advance holds and timers; queue what is due for ``sinks`` (name -> the sink's
        ``resend_interval``). Returns the queued notifications."""
        self.hold.advance(now)
        muted = self.mute.muted(self.alerts.values(), self.wall())
        queued: list[Notification] = []
        for g in sorted({a.group for a in self.alerts.values()} | self.group.keys()):
            members = [a for a in self.alerts.values() if a.group == g]
            for sink, resend in sinks.items():
                n = self.group.tick(g, sink, self.route.select(members, sink), muted, now,
                                    resend)
                if n is not None:
                    queued.append(n)
        self._persist(queued, now)
        return queued

    def meta(self, text: str, now: float, sinks: list[str]) -> list[Notification]:
        """A notification about the agent itself (a sink failing, the outbox full)."""
        out = [Notification(id=uuidlib.uuid4().hex, sink=s, group_key=f"agent/{self.host}",
                            reason="meta", created_at=now, alerts=(), text=text)
               for s in sinks]
        self._persist(out, now, only_rows=True)
        return out

    # --- the notification log ------------------------------------------------------------
    def _persist(self, queued: list[Notification], now: float, only_rows: bool = False) -> None:
        """Write the tick's outbox rows and every changed alert and group in ONE unit.
        Python-side state changes only after the unit committed, so a unit that failed on
        disk and runs again in memory writes exactly the same thing."""
        if not queued and (only_rows or not self._pending_writes(now)):
            return  # nothing changed: no transaction (a COMMIT is an fsync every tick)
        wall = self.wall()
        forget = [] if only_rows else self._forgettable(now)
        alerts = [] if only_rows else [
            (fp, a.group, st.alert_to_json(a.alert), a.state, a.hold_until, json.dumps(a.fires),
             now) for fp, a in self.alerts.items() if a.dirty and fp not in forget]
        groups = [] if only_rows else [(k, gs.write, gs.created_at, gs.last_sent_at,
                                        json.dumps({**gs.sent, "__instance__": gs.instance}))
                                       for k, gs in self.groups.items() if gs.write != "clean"]

        def write(c: sqlite3.Connection) -> list[tuple[str, int, str, bool]]:
            dropped = []
            with st.transaction(c):
                for n in queued:  # a full outbox gives way (watchdog.notify.outbox)
                    keep, k, what = outbox.make_room(c, n, self.cfg.outbox_max)
                    if k:
                        outbox.count(c, n.sink, k, wall, what)
                        dropped.append((n.sink, k, what, keep is None))
                    if keep is None:
                        continue
                    c.execute("INSERT INTO notify_outbox (sink, group_key, reason, doc, "
                              "created_at, next_at) VALUES (?, ?, ?, ?, ?, 0)",
                              (keep.sink, keep.group_key, keep.reason,
                               st.notification_to_json(keep), wall))
                for fp in forget:
                    c.execute("DELETE FROM notify_alerts WHERE fp = ?", (fp,))
                c.executemany(
                    "INSERT INTO notify_alerts (fp, group_key, doc, state, hold_until, fires, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(fp) DO UPDATE SET "
                    "group_key = excluded.group_key, doc = excluded.doc, state = "
                    "excluded.state, hold_until = excluded.hold_until, fires = excluded.fires, "
                    "updated_at = excluded.updated_at", alerts)
                for (g, sink), how, created, last, sent in groups:
                    if how == "delete":
                        c.execute("DELETE FROM notify_groups WHERE group_key = ? AND sink = ?",
                                  (g, sink))
                    else:
                        c.execute(
                            "INSERT INTO notify_groups (group_key, sink, created_at, "
                            "last_sent_at, sent) VALUES (?, ?, ?, ?, ?) ON CONFLICT(group_key, "
                            "sink) DO UPDATE SET created_at = excluded.created_at, "
                            "last_sent_at = excluded.last_sent_at, sent = excluded.sent",
                            (g, sink, created, last, sent))
            return dropped

        for sink, n_dropped, what, refused in self.db.run(write):
            self.dropped += n_dropped
            (log.error if refused else log.warning)(
                "outbox for sink %s is full (%d): %s", sink, self.cfg.outbox_max, what)
        for fp in forget:
            self.alerts.pop(fp, None)
        for fp, *_ in alerts:
            if fp in self.alerts:
                self.alerts[fp].dirty = False
        for k, how, *_ in groups:
            gs = self.groups.get(k)
            if gs is None:
                continue
            if how == "delete" and gs.write == "delete":
                del self.groups[k]
            elif gs.write == "save":
                gs.write = "clean"

    def _pending_writes(self, now: float) -> bool:
        """Whether any alert or group has state to write or delete."""
        return (any(a.dirty for a in self.alerts.values())
                or any(gs.write != "clean" for gs in self.groups.values())
                or bool(self._forgettable(now)))

    def _forgettable(self, now: float) -> list[str]:
        """Resolved alerts no group still owes a resolve to and with no firing inside the
        flap window: their rows can go."""
        owed = {fp for gs in self.groups.values() for fp in gs.sent}
        return [fp for fp, a in self.alerts.items()
                if a.state == "resolved" and fp not in owed
                and not any(now - t <= self.cfg.flap_window for t in a.fires)]
