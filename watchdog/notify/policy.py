"""Notification policy: incidents in, notifications (one per group and sink) out.

Stages, in the order Alertmanager's notify pipeline runs them:

1. **Identity.** Each incident gets its fingerprint when first seen (:mod:`.fingerprint`),
   and its job (``job_of``, the agent's job tracker: the config's ``job:`` or what the
   GPUs' processes say). A job-wide kind (``comm_hang``, ``stall``) on a node whose job is
   known gets the job's fingerprint, the same on every node of the job, so PagerDuty
   folds the nodes' triggers into one incident.
2. **Hold and flapping.** A resolve is held ``resolve_hold``; a re-fire inside the hold
   continues the same alert (no new page, no resolve). A job-wide alert's resolve is
   held further while the fleet says another node of the job is still in it
   (``job_clear``, the agent's view of Prometheus: ``job: {prometheus: URL}``), so the
   job's one PagerDuty incident resolves with its last node, at most
   :data:`FLEET_HOLD_MAX_S` later. An alert that fired
   ``flap_count`` times within ``flap_window`` is flapping and its resolve is held
   ``flap_hold``: an incident firing and clearing every minute for an hour is one page
   and, once it stays clear, one resolve. After a restart every alert that was firing is
   held ``restart_grace`` for the detector to raise it again.
3. **Muting.** Inhibition (``gpu_lost``/``nvml_error`` on a GPU, or node-wide, mute every
   other kind there; more pairs from the config) and silences (wall clock, stored in the
   database so ``watchdog silence`` works on a running agent). A muted alert is not
   notified while it fires; if it had been notified, its resolve still is.
   (The rules' own ``inhibited_by`` stops an incident from being raised at all; this
   layer only decides who hears of incidents that exist, and keeps them in ``alerts``.)
4. **Routing** by severity and kind to named sinks (default: every sink; ``sinks_for``).
5. **Grouping** by host (and Slurm job id): one notification lists every alert of the
   group; a new group waits ``group_wait``, later changes ``group_interval``, a group
   that still fires and did not change is re-sent after ``repeat_interval``.

All timers here run on the injected clock. Everything decided in a tick is written in one
transaction with the outbox rows (see :mod:`.store`).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from watchdog.incident import Incident
from watchdog.notify import outbox
from watchdog.notify import store as st
from watchdog.notify.base import Alert, Notification
from watchdog.notify.config import NotifyConfig
from watchdog.notify.fingerprint import group_key, identity
from watchdog.store.store import Store

log = logging.getLogger("watchdog.notify")

RuleInfo = Callable[[str], tuple[str, str | None]]  # rule name -> (scope, runbook)
#: an incident's GPU UUIDs -> (job id, run id) of the one job they run, or None; the
#: run id is None for a job no scheduler vouches for (never job-wide)
JobOf = Callable[[list[str]], tuple[str, str | None] | None]
#: (kind, job id) -> True: no other node of the job is in it; False: some are; None: unknown
JobClear = Callable[[str, str], bool | None]
FLEET_HOLD_MAX_S = 3600.0  # a job-wide resolve is never held longer for the fleet
FLEET_RECHECK_S = 15.0  # a resolve held for the fleet is looked at again this often


@dataclass(slots=True)
class AlertState:
    """What the policy knows of one fingerprint. ``state``: firing | resolving | resolved."""

    alert: Alert
    state: str
    group: str
    hold_until: float | None = None
    fires: list[float] = field(default_factory=list)
    dirty: bool = True


@dataclass(slots=True)
class GroupState:
    """One group as one sink saw it: ``sent`` maps fingerprint -> [status, gpus]."""

    instance: str
    created_at: float
    last_sent_at: float | None = None
    sent: dict[str, list[Any]] = field(default_factory=dict)
    dirty: bool = True


class Policy:
    """Turns detector transitions into outbox rows. Not thread-safe: the tick thread only."""

    def __init__(self, cfg: NotifyConfig, db: Store, host: str | None,
                 rule_info: RuleInfo, now: float,
                 wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.db = db
        db.migrate("notify", st.STEPS)
        db.migrate("notify_dropped", outbox.STEPS)
        self.wall = wall  # silences and outbox rows: real time, not a simulated clock
        self.host = host
        self.rule_info = rule_info
        self.alerts: dict[str, AlertState] = {}
        self.groups: dict[tuple[str, str], GroupState] = {}
        self._fp_of: dict[int, tuple[Incident, str, str | None]] = {}
        self.job_of: JobOf | None = None  # set by the agent (its job tracker)
        self.job_clear: JobClear | None = None  # set by the agent (job: {prometheus: URL})
        self._fleet_held: set[str] = set()
        self._silences: list[dict[str, Any]] = []
        self._silences_at = -1e18
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
            a = st.alert_from_json(doc)
            times = [min(t, now) for t in json.loads(fires)]
            if state == "resolved":
                self.alerts[fp] = AlertState(a, state, g, None, times, dirty=False)
                continue
            # firing before the restart: the detector must raise it again within the grace
            self.alerts[fp] = AlertState(a, "resolving", g, now + self.cfg.restart_grace, times)
        for g, sink, created, last, sent in groups:
            d = json.loads(sent)
            inst = d.pop("__instance__", g)
            self.groups[(g, sink)] = GroupState(
                inst, min(created, now), None if last is None else min(last, now), d, False)
        if self.alerts:
            held = sum(1 for a in self.alerts.values() if a.state == "resolving")
            if held:
                log.info("%d alert(s) were firing when the agent stopped: held %.0f s for "
                         "the detector to confirm them", held, self.cfg.restart_grace)

    # --- incidents in ----------------------------------------------------------------------
    def observe(self, changes: list[tuple[str, Incident]], now: float) -> None:
        """Take the detector's transitions (``firing``, ``updated``, ``resolved``)."""
        for what, inc in changes:
            fp = self._fp(inc)
            cur = self.alerts.get(fp)
            if what == "firing":
                alert = self._alert(inc, fp, "firing")
                fires = [t for t in (cur.fires if cur else []) if now - t <= self.cfg.flap_window]
                if cur is not None and cur.state == "resolving":
                    alert = replace(alert, started_at=cur.alert.started_at,
                                    fired_at=cur.alert.fired_at)
                self.alerts[fp] = AlertState(alert, "firing", self._group(inc), None,
                                             [*fires, now])
            elif cur is None:
                continue  # an update or resolve of an incident this policy never saw fire
            elif what == "updated":
                cur.alert = replace(self._alert(inc, fp, "firing"),
                                    started_at=cur.alert.started_at, fired_at=cur.alert.fired_at)
                cur.dirty = True
            elif what == "resolved":
                flapping = len(cur.fires) >= self.cfg.flap_count
                hold = self.cfg.flap_hold if flapping else self.cfg.resolve_hold
                cur.alert = replace(cur.alert, resolved_at=inc.resolved_at or now,
                                    evidence=_plain(inc.evidence) or cur.alert.evidence)
                cur.state, cur.hold_until, cur.dirty = "resolving", now + hold, True
                if self.job_clear is not None and cur.alert.job_id and \
                        fp.startswith("job-"):  # ask the fleet now: known by the hold's end
                    self.job_clear(cur.alert.kind, cur.alert.job_id)
                if flapping:
                    log.info("%s on %s is flapping (%d firings in %.0f min): its resolve is "
                             "held %.0f min", inc.kind, inc.host, len(cur.fires),
                             self.cfg.flap_window / 60, hold / 60)
            if what == "resolved":
                self._fp_of.pop(id(inc), None)

    def _fp(self, inc: Incident) -> str:
        """The fingerprint fixed when ``inc`` was first seen. The map holds the incident
        itself, so its ``id()`` cannot be reused by another object while it is there."""
        return self._identity(inc)[0]

    def _identity(self, inc: Incident) -> tuple[str, str | None]:
        """``(fingerprint, job id)`` fixed when ``inc`` was first seen."""
        entry = self._fp_of.get(id(inc))
        if entry is not None and entry[0] is inc:
            return entry[1], entry[2]
        job = None
        if self.job_of is not None:
            try:
                job = self.job_of(list(inc.uuids))
            except Exception as e:  # noqa: BLE001 - identity must not stop alerting
                log.warning("job of %s on %s unknown: %s", inc.kind, inc.host, e)
        fp, job_id = identity(inc, self.rule_info(inc.rule)[0], job)
        self._fp_of[id(inc)] = (inc, fp, job_id)
        return fp, job_id

    def _group(self, inc: Incident) -> str:
        return group_key(inc.host, self._identity(inc)[1])

    def _alert(self, inc: Incident, fp: str, status: str) -> Alert:
        scope, runbook = self.rule_info(inc.rule)
        url = runbook
        if self.cfg.runbook_url:
            url = self.cfg.runbook_url.replace("{kind}", inc.kind)
        return Alert(
            fingerprint=fp, status=status, kind=inc.kind, severity=inc.severity,  # type: ignore[arg-type]
            host=inc.host, gpus=tuple(inc.gpus), uuids=tuple(inc.uuids),
            started_at=inc.started_at, fired_at=inc.fired_at, resolved_at=None,
            rule=inc.rule, summary=inc.summary, evidence=_plain(inc.evidence),
            labels=dict(inc.labels), runbook_url=url, job_id=self._identity(inc)[1],
            scope="gpu" if scope == "gpu" and len(inc.uuids) == 1 else "node")

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

    # --- muting -----------------------------------------------------------------------------
    def _muted(self, now_wall: float) -> set[str]:
        live = [a for a in self.alerts.values() if a.state != "resolved"]
        out: set[str] = set()
        for rule in self.cfg.inhibit:
            sources = [a.alert for a in live if a.alert.kind in rule.source]
            for s in sources:
                for a in live:
                    t = a.alert
                    if t.fingerprint == s.fingerprint or t.host != s.host:
                        continue
                    if rule.target and t.kind not in rule.target:
                        continue
                    if not rule.target and t.kind in rule.source:
                        continue
                    if not s.uuids or (t.uuids and set(t.uuids) <= set(s.uuids)):
                        out.add(t.fingerprint)
        for a in live:
            if self._silenced(a.alert, now_wall):
                out.add(a.alert.fingerprint)
        return out

    def _silenced(self, a: Alert, now_wall: float) -> bool:
        if now_wall - self._silences_at >= 5.0:
            self._silences = self.db.run(lambda c: st.silences(c, now_wall))
            self._silences_at = now_wall
        for s in self._silences:
            if s["starts_at"] > now_wall or s["ends_at"] <= now_wall:
                continue
            if s["host"] and s["host"] != a.host:
                continue
            if s["kind"] and s["kind"] != a.kind:
                continue
            # a GPU silence mutes an alert only when it covers every GPU the alert names
            if s["gpu"] is None or (a.gpus and all(
                    s["gpu"] in (g, u) for g, u in zip(a.gpus, a.uuids or a.gpus,
                                                      strict=False))):
                return True
        return False

    # --- notifications out ------------------------------------------------------------------
    def tick(self, now: float, sinks: dict[str, Any]) -> list[Notification]:
        """Advance holds and timers; queue what is due. Returns the queued notifications."""
        for a in self.alerts.values():
            if a.state == "resolving" and a.hold_until is not None and now >= a.hold_until:
                if self._fleet_holds(a, now):
                    continue
                self._fleet_held.discard(a.alert.fingerprint)
                a.state, a.hold_until, a.dirty = "resolved", None, True
                a.alert = replace(a.alert, status="resolved",
                                  resolved_at=a.alert.resolved_at or now)
        muted = self._muted(self.wall())
        queued: list[Notification] = []
        for g in sorted({a.group for a in self.alerts.values()} | {k for k, _ in self.groups}):
            members = [a for a in self.alerts.values() if a.group == g]
            for sink in sinks:
                n = self._group_tick(g, sink, members, muted, now, sinks[sink])
                if n is not None:
                    queued.append(n)
        self._persist(queued, now)
        return queued

    def _group_tick(self, g: str, sink: str, members: list[AlertState], muted: set[str],
                    now: float, sink_obj: Any) -> Notification | None:
        gs = self.groups.get((g, sink))
        sent = gs.sent if gs else {}
        view: dict[str, Alert] = {}
        for a in members:
            fp = a.alert.fingerprint
            if sink not in self.cfg.sinks_for(a.alert.severity, a.alert.kind,
                                              down=a.alert.labels.get("sink")):
                continue
            if a.state == "resolved":
                if sent.get(fp, [None])[0] == "firing" and self.cfg.send_resolved:
                    view[fp] = a.alert
            elif fp not in muted or sent.get(fp, [None])[0] == "firing":
                view[fp] = replace(a.alert, status="firing", resolved_at=None)
        if not view and not sent:
            if gs is not None:
                gs.dirty = "close"  # type: ignore[assignment]
            return None
        if gs is None:
            gs = self.groups[(g, sink)] = GroupState(f"{g}#{uuidlib.uuid4().hex[:8]}", now)
        current = {fp: [a.status, list(a.gpus)] for fp, a in view.items()}
        changed = tuple(sorted(fp for fp in current if current[fp] != sent.get(fp)))
        gone = [fp for fp in sent if fp not in current]  # resolved but send_resolved off
        firing = any(a.status == "firing" for a in view.values())
        reason = None
        if changed:
            first = gs.last_sent_at is None
            wait = self.cfg.group_wait if first else self.cfg.group_interval
            since = gs.created_at if first else gs.last_sent_at
            if now >= since + wait:  # type: ignore[operator]
                reason = "new" if first else (
                    "resolved" if not firing else "update")
        elif firing and gs.last_sent_at is not None:
            resend = getattr(sink_obj, "resend_interval", None)
            if now >= gs.last_sent_at + self.cfg.repeat_interval:
                reason = "repeat"
            elif resend and now >= gs.last_sent_at + resend:
                reason = "refresh"
        if reason is None:
            if gone and not changed:
                for fp in gone:
                    sent.pop(fp, None)
                gs.dirty = True
            return None
        alerts = tuple(sorted(view.values(), key=lambda a: (a.status != "firing", a.kind,
                                                              a.gpus)))
        n = Notification(id=uuidlib.uuid4().hex, sink=sink, group_key=gs.instance,
                         reason=reason, created_at=now, alerts=alerts,  # type: ignore[arg-type]
                         changed=changed)
        gs.sent = {fp: v for fp, v in current.items() if v[0] == "firing"}
        gs.last_sent_at, gs.dirty = now, True
        if not gs.sent:  # everything resolved: the next incident opens a new group
            gs.dirty = "close"  # type: ignore[assignment]
        return n

    def meta(self, text: str, now: float, sinks: list[str]) -> list[Notification]:
        """A notification about the agent itself (a sink failing, the outbox full)."""
        out = [Notification(id=uuidlib.uuid4().hex, sink=s, group_key=f"agent/{self.host}",
                            reason="meta", created_at=now, alerts=(), text=text)
               for s in sinks]
        self._persist(out, now, only_rows=True)
        return out

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
        groups = [] if only_rows else [(k, gs.dirty, gs.created_at, gs.last_sent_at,
                                        json.dumps({**gs.sent, "__instance__": gs.instance}))
                                       for k, gs in self.groups.items() if gs.dirty]

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
                    if how == "close":
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

        for sink, k, what, refused in self.db.run(write):
            self.dropped += k
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
            if how == "close" and gs.dirty == "close":
                del self.groups[k]
            elif gs.dirty is True:
                gs.dirty = False

    def _pending_writes(self, now: float) -> bool:
        """Whether any alert or group has state to write or delete."""
        return (any(a.dirty for a in self.alerts.values())
                or any(gs.dirty for gs in self.groups.values())
                or bool(self._forgettable(now)))

    def _forgettable(self, now: float) -> list[str]:
        """Resolved alerts no group still owes a resolve to and with no firing inside the
        flap window: their rows can go."""
        owed = {fp for gs in self.groups.values() for fp in gs.sent}
        return [fp for fp, a in self.alerts.items()
                if a.state == "resolved" and fp not in owed
                and not any(now - t <= self.cfg.flap_window for t in a.fires)]


def _plain(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as JSON-safe plain values (NaN -> None, numpy -> Python)."""
    from watchdog.incident import _jsonable

    return _jsonable(dict(evidence or {}))
