"""The node-level incidents the agent raises about itself, not through a rule.

* ``nvml_error`` (rule ``nvml_unavailable``, critical): the GPUs cannot be read at all (no
  NVML library, the driver not loaded, every reading failing for 30 s). No GPU on the node
  is watched until it resolves, when the source opens again.
* ``agent`` (rule ``state_memory_only``, warning): the state database cannot be written
  (:mod:`watchdog.store.store`): the agent runs from memory; resolved once the state is
  on disk again.
* ``agent`` (rule ``state_corrupt``, warning): a damaged ``state.db`` was moved aside and
  a fresh one started; a notice that resolves after :data:`CORRUPT_NOTICE_S`.
* ``agent`` (rule ``agent_unwatched``, warning): the agent itself did not run for more
  than :data:`UNWATCHED_S` (stopped with SIGSTOP, a paused VM, a swap storm): no GPU was
  watched meanwhile, and the page says for how long; a notice that resolves after
  :data:`UNWATCHED_NOTICE_S`.

Each is one incident at a time (a second cause while one is active changes nothing), and
goes to the store, the log and the sinks like any rule's (``docs/runbooks/nvml_error.md``,
``docs/runbooks/agent.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from watchdog.incident import Incident
from watchdog.store.store import Store

UNAVAILABLE_RULE = "nvml_unavailable"
MEMORY_RULE = "state_memory_only"
CORRUPT_RULE = "state_corrupt"
CORRUPT_NOTICE_S = 900.0  # a corrupt database moved aside stays an active incident this long
UNWATCHED_RULE = "agent_unwatched"
UNWATCHED_S = 60.0  # the agent not running for longer than this is an incident
UNWATCHED_NOTICE_S = 900.0  # ... that stays active this long
#: the agent's own rules -> their kinds (for the runbook a page names)
OWN_RULES = {UNAVAILABLE_RULE: "nvml_error", MEMORY_RULE: "agent", CORRUPT_RULE: "agent",
             UNWATCHED_RULE: "agent"}
DRIVER_CHECKS = "check the driver (nvidia-smi, dmesg | grep -i nvrm)"

Changes = list[tuple[str, Incident]]
log = logging.getLogger("watchdog.agent")


class OwnIncidents:
    """The agent's own incidents; ``host()`` names the node (known once a source opened)."""

    def __init__(self, host: Callable[[], str | None]) -> None:
        self._host = host
        self.active: dict[str, Incident] = {}  # by rule

    def _raise(self, now: float, rule: str, kind: str, severity: str, summary: str,
               error: str, changes: Changes) -> None:
        if rule in self.active:
            return
        inc = Incident(kind=kind, severity=severity, host=self._host() or "localhost",
                       gpus=[], uuids=[], started_at=now, fired_at=now, resolved_at=None,
                       rule=rule, summary=summary, evidence={"error": error})
        self.active[rule] = inc
        changes.append(("firing", inc))

    def resolve(self, now: float, rule: str, why: str, changes: Changes) -> Incident | None:
        """Resolve ``rule``'s incident (if active); returns it."""
        inc = self.active.pop(rule, None)
        if inc is None:
            return None
        inc.resolved_at = now
        inc.evidence["resolved_by"] = why
        changes.append(("resolved", inc))
        return inc

    # --- the GPUs cannot be read --------------------------------------------------------
    def source_down(self, now: float, why: str, changes: Changes,
                    remedy: str | None = None) -> None:
        """``why``: the cause in words; ``remedy``: what to do (driver checks by default)."""
        self._raise(now, UNAVAILABLE_RULE, "nvml_error", "critical",
                    f"cannot read the GPUs on this node: {why}. No GPU here is being watched; "
                    f"{remedy or DRIVER_CHECKS}", why, changes)

    def source_up(self, now: float, changes: Changes) -> bool:
        """The source opened: resolve ``nvml_error``; whether one was active."""
        return self.resolve(now, UNAVAILABLE_RULE, "the GPUs can be read again",
                            changes) is not None

    # --- the state database ---------------------------------------------------------------
    def storage(self, now: float, db: Store, changes: Changes) -> None:
        """The state database's news since the last tick (:meth:`Store.take_events`) as
        incidents; also gives it its chance to go back to disk (paced by itself)."""
        db.try_disk()
        for kind, text in db.take_events():
            if kind == "memory":
                self._raise(now, MEMORY_RULE, "agent", "warning",
                            f"nvml-watchdog keeps its state in MEMORY ONLY: {text}. Detection "
                            "and alerting go on; incidents, silences and learned levels since "
                            f"then are lost if the agent restarts before {db.dir} can be "
                            "written again (free space, fix its permissions or mount)",
                            text, changes)
            elif kind == "disk":
                self.resolve(now, MEMORY_RULE, "state written to disk again", changes)
            elif kind == "corrupt":
                self.resolve(now, CORRUPT_RULE, "superseded", changes)
                self._raise(now, CORRUPT_RULE, "agent", "warning",
                            f"nvml-watchdog's state database was damaged: {text}. A fresh one "
                            "is in use with what could be read; learned waits and levels that "
                            "were lost are learned again", text, changes)
        old = self.active.get(CORRUPT_RULE)
        if old is not None and now - old.started_at >= CORRUPT_NOTICE_S:
            self.resolve(now, CORRUPT_RULE, "notice period over", changes)

    # --- the agent itself did not run ----------------------------------------------------
    def gap(self, now: float, since: float, interval: float, changes: Changes) -> None:
        """No tick ran from ``since`` to ``now`` (more than a few intervals): one log line
        and, past :data:`UNWATCHED_S`, an ``agent`` incident saying how long the node was
        not watched."""
        from datetime import UTC, datetime

        from watchdog.notify.render import how_long

        def at(t: float) -> str:
            return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%SZ")

        gap = now - since
        log.warning("no tick for %s (%s to %s, every %gs): the agent was stopped or starved "
                    "(SIGSTOP, a paused VM, swap); the GPUs were not watched meanwhile",
                    how_long(gap), at(since), at(now), interval)
        if gap <= UNWATCHED_S:
            return
        self.resolve(now, UNWATCHED_RULE, "superseded", changes)
        self._raise(now, UNWATCHED_RULE, "agent", "warning",
                    f"nvml-watchdog did not run for {how_long(gap)} ({at(since)} to "
                    f"{at(now)}): no GPU on this node was watched meanwhile. The agent was "
                    "stopped (SIGSTOP), its VM paused, or the host starved it (swap, CPU): "
                    "see the host's load and journalctl -u nvml-watchdog", f"no tick for "
                    f"{gap:.0f} s", changes)
        self.active[UNWATCHED_RULE].evidence["unwatched_s"] = round(gap, 1)

    def notices(self, now: float, changes: Changes) -> None:
        """Resolve the ``agent_unwatched`` notice once :data:`UNWATCHED_NOTICE_S` passed."""
        old = self.active.get(UNWATCHED_RULE)
        if old is not None and now - old.started_at >= UNWATCHED_NOTICE_S:
            self.resolve(now, UNWATCHED_RULE, "notice period over", changes)

# --- an alerting sink that is down -------------------------------------------------------------
SINK_RULE = "sink_down"
OWN_RULES[SINK_RULE] = "agent"


def sinks_down(own: OwnIncidents, now: float, down: dict[str, tuple[str, str]],
               changes: Changes) -> None:
    """One ``agent`` incident (rule ``sink_down``, label ``sink``) per alerting sink that
    is down (``down``: name -> (severity, why), :meth:`Notifier.down`); resolved once the
    sink delivers again. The policy routes it to the other sinks only
    (:meth:`NotifyConfig.sinks_for`): a page about Slack refusing everything must not wait
    in Slack's queue. Critical when the sink carries critical pages."""
    for name, (severity, why) in sorted(down.items()):
        key = f"{SINK_RULE}/{name}"
        if key in own.active:
            continue
        inc = Incident(kind="agent", severity=severity, host=own._host() or "localhost",
                       gpus=[], uuids=[], started_at=now, fired_at=now, resolved_at=None,
                       rule=SINK_RULE, summary=why, evidence={"sink": name},
                       labels={"sink": name})
        own.active[key] = inc
        changes.append(("firing", inc))
    for key in [k for k in own.active if k.startswith(f"{SINK_RULE}/")]:
        if key.split("/", 1)[1] not in down:
            own.resolve(now, key, "the sink delivers again", changes)
