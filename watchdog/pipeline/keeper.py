"""The live pipeline's writes to the agent's state: each incident's row, the learned
state every minute, the status row ``watchdog status`` reads every few seconds, the daily
prune, and the in-memory status file while the database is in memory only.

None of it may stop detection: a failure is logged once (the same error every tick is
one line) and retried on the next tick.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from watchdog.detect import Detector
from watchdog.incident import Incident
from watchdog.pipeline import learned_state
from watchdog.store.agent import AgentStore
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.agent")

SAVE_EVERY_S = 60.0  # learned state to the database (and at shutdown)
STATUS_EVERY_S = 5.0  # the status row `watchdog status` reads
PRUNE_EVERY_S = 86_400.0


class StateKeeper:
    """Writes the pipeline's state to ``store`` (None: nothing is kept)."""

    def __init__(self, store: AgentStore | None) -> None:
        self.store = store
        # id(incident) -> (the incident, its key in the store); holding the incident keeps
        # its id from being reused by a new one while the entry exists
        self._keys: dict[int, tuple[Incident, str]] = {}
        self._saved_at = -math.inf
        self._status_at = -math.inf
        self._pruned_at = -math.inf
        self._runtime_file = False
        self.error: str | None = None

    def record(self, now: float, inc: Incident) -> None:
        """Write ``inc``'s row (keyed by its rule, first GPU and start)."""
        entry = self._keys.get(id(inc))
        if entry is not None and entry[0] is inc:
            key = entry[1]
        else:
            who = inc.uuids[0] if inc.uuids else "node"
            key = f"{inc.rule}/{who}/{round(inc.started_at * 1000)}"
            self._keys[id(inc)] = (inc, key)
        if inc.resolved_at is not None:
            self._keys.pop(id(inc), None)
        if self.store is None:
            return
        try:
            self.store.record_incident(key, inc, now)
        except Exception as e:  # noqa: BLE001 - a broken database must not stop detection
            self.failed(f"cannot record incident {key}", e)

    def write_status(self, doc: JsonDoc, now: float) -> None:
        """The status row in the state database and the runtime file beside it (what
        ``watchdog status`` and ``check --agent`` read)."""
        if self.store is not None:
            self.store.write_status(doc, now)
            self.runtime_status(doc, now)

    def upkeep(self, now: float, detector: Detector | None, host: str | None,
               status: Callable[[], JsonDoc], retention_s: float) -> None:
        """What is due at ``now``: the learned state, the status row, the prune of what
        resolved more than ``retention_s`` ago."""
        if self.store is None:
            return
        try:
            if now - self._saved_at >= SAVE_EVERY_S:
                self.save(now, detector, host)
            if now - self._status_at >= STATUS_EVERY_S:
                self._status_at = now
                self.write_status(status(), now)
            if now - self._pruned_at >= PRUNE_EVERY_S:
                self._pruned_at = now
                n = self.store.prune(now, retention_s)
                if n:
                    log.info("pruned %d old row(s) from the state database", n)
        except Exception as e:  # noqa: BLE001 - a broken database must not stop detection
            self.failed("cannot write agent state", e)
        else:
            self.error = None

    def save(self, now: float, detector: Detector | None, host: str | None) -> None:
        """Write the learned waits and levels (every minute and at shutdown)."""
        self._saved_at = now
        if self.store is not None and detector is not None:
            learned_state.persist(self.store, detector, host, now)

    def restore(self, detector: Detector, host: str | None) -> None:
        """Give a new detector what was learned before."""
        if self.store is not None:
            learned_state.restore(self.store, detector, host)

    def runtime_status(self, doc: JsonDoc, now: float) -> None:
        """While the state is in memory only, ``watchdog status`` reads the status from a
        file in memory (:mod:`watchdog.store.runtime`); it goes once the state is back."""
        from watchdog.store import runtime

        if self.store is None:
            return
        db = self.store.db
        try:
            if db.mode == "memory":
                runtime.write(db.dir, {**doc, "status_written_at": now})
                self._runtime_file = True
            elif self._runtime_file:
                runtime.remove(db.dir)
                self._runtime_file = False
        except OSError as e:
            self.failed("cannot write the in-memory status file", e)

    def failed(self, what: str, e: BaseException) -> None:
        """Log a state-database failure once (the same error every tick is one line)."""
        text = f"{type(e).__name__}: {e}"
        if text != self.error:
            log.error("%s: %s (detection and alerting go on)", what, text)
        self.error = text
