"""A listener that prints incidents to the terminal, readable at 3 a.m.

The first place every install hears of incidents: the daemon's journal (``journalctl -u
nvml-watchdog``) and the newcomer's terminal both show it. It takes the same
``(transition, incident)`` calls as every listener of the live pipeline; Slack, PagerDuty
and Alertmanager hear through alerting (:mod:`watchdog.notify.notifier`).

"How long" is the one definition of :mod:`watchdog.notify.render`: the condition's age,
from ``started_at``. A firing line says ``(for 2 min 30 s)`` when the condition held that
long before the rule fired it, and nothing when it fired at once; a resolved line says
``(lasted 40 min)``, the same number a resolve page shows as ``after 40 min``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from watchdog.escape import line
from watchdog.incident import Incident, gpu_list
from watchdog.notify.render import age, how_long


def gpus_phrase(gpus: list[str]) -> str:
    """``["0","1","2","3","5"]`` -> ``"GPUs 0-3,5"``; one GPU -> ``"GPU 3"``."""
    if not gpus:
        return "node"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + gpu_list(gpus)


def incident_line(state: str, inc: Incident, now: float) -> tuple[float, str]:
    """``(when, text)`` of one transition: FIRING/UPDATED/RESOLVED, severity, kind, host,
    GPUs, summary, how long, as one line (:func:`watchdog.escape.line`). ``now``: the
    agent's clock (an ``updated`` line's time, which the incident does not carry)."""
    sev = f"{inc.severity.upper():8}"
    if state == "resolved":
        when = inc.resolved_at if inc.resolved_at is not None else now
        head = f"RESOLVED {'':8}"
        tail = f" (lasted {how_long(age(inc.started_at, when, when))})"
    elif state == "updated":  # GPUs joined or left a firing incident
        when = now
        head = f"UPDATED  {sev}"
        tail = f" (GPUs changed; for {how_long(age(inc.started_at, None, when))})"
    else:
        when = inc.fired_at if inc.fired_at is not None else inc.started_at
        head = f"FIRING   {sev}"
        held = age(inc.started_at, None, when)
        # fired the moment the condition began: nothing to say about how long
        tail = f" (for {how_long(held)})" if held >= 1 else ""
    where = gpus_phrase(inc.gpus)
    # a summary that names its GPUs itself ("GPU 7 XID 13") gets no second prefix
    prefix = "" if inc.summary.startswith(("GPU ", "GPUs ")) else f" {where}:"
    return when, line(f"{head} {inc.kind:16} {inc.host}{prefix} {inc.summary}{tail}")


class ConsoleNotifier:
    """Prints one line per transition to a stream: time, then :func:`incident_line`.

    ``clock``: the agent's clock (for the time of an ``updated`` line, which the incident
    does not carry); default the wall clock.
    """

    def __init__(self, stream: TextIO | None = None, color: bool | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.stream = stream or sys.stdout
        self.color = self.stream.isatty() if color is None else color
        self.clock = clock or time.time

    def __call__(self, state: str, inc: Incident) -> None:
        when, text = incident_line(state, inc, self.clock())
        stamp = datetime.fromtimestamp(when, tz=UTC).strftime("%H:%M:%S")
        line = f"{stamp}Z {text}"
        if self.color:
            colour = "\033[1;32m" if state == "resolved" else (
                "\033[1;31m" if inc.severity == "critical" else "\033[1;33m")
            line = f"{colour}{line}\033[0m"
        print(line, file=self.stream, flush=True)


class IncidentLog:
    """The daemon's console listener: each transition is a line of the agent's one log format
    (:mod:`watchdog.logs`), at a priority the journal filters on: a critical firing is an
    error (``journalctl -p err`` lists it), a warning a warning, a resolve a notice.

    ``stamp``: also say the incident's own time (a simulated node at ``--speed``, whose
    clock runs ahead of the log's)."""

    def __init__(self, clock: Callable[[], float], stamp: bool = False) -> None:
        self.clock = clock
        self.stamp = stamp
        self.log = logging.getLogger("watchdog.incident")

    def __call__(self, state: str, inc: Incident) -> None:
        from watchdog.logs import NOTICE

        when, text = incident_line(state, inc, self.clock())
        if self.stamp:
            text += f" [at {datetime.fromtimestamp(when, tz=UTC).strftime('%H:%M:%S')}Z]"
        if state == "resolved" or inc.severity == "info":
            level = NOTICE
        else:
            level = logging.ERROR if inc.severity == "critical" else logging.WARNING
        self.log.log(level, "%s", text)
