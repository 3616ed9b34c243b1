"""Stage 3, mute: inhibition and silences.

Inhibition: ``gpu_lost``/``nvml_error`` on a GPU, or node-wide, mute every other kind
there; more pairs from the config. Silences are on the wall clock and stored in the
database, so ``watchdog silence`` works on a running agent. A muted alert is not notified
while it fires; if it had been notified, its resolve still is (the group stage decides
that, knowing what was sent). The rules' own ``inhibited_by`` stops an incident from being
raised at all; this stage only decides who hears of incidents that exist.
"""

from __future__ import annotations

from collections.abc import Iterable

from watchdog.notify import store as st
from watchdog.notify.base import Alert
from watchdog.notify.config import NotifyConfig
from watchdog.notify.stages.state import AlertState
from watchdog.store.store import Store
from watchdog.untyped import JsonDoc

SILENCES_EVERY_S = 5.0  # the silences are read from the database at most this often


class MuteStage:
    """The fingerprints muted now, by inhibition or silence."""

    def __init__(self, cfg: NotifyConfig, db: Store) -> None:
        self.cfg = cfg
        self.db = db
        self._silences: list[JsonDoc] = []
        self._silences_at = -1e18

    def muted(self, alerts: Iterable[AlertState], now_wall: float) -> set[str]:
        """Fingerprints of the alerts not resolved that are inhibited or silenced at
        ``now_wall`` (real time)."""
        live = [a for a in alerts if a.state != "resolved"]
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
            if self.silenced(a.alert, now_wall):
                out.add(a.alert.fingerprint)
        return out

    def silenced(self, a: Alert, now_wall: float) -> bool:
        """Whether a silence in force at ``now_wall`` covers ``a``."""
        if now_wall - self._silences_at >= SILENCES_EVERY_S:
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
