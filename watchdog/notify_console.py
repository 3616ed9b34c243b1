"""A notifier that prints incidents to the terminal, readable at 3 a.m.

The first notifier every install has: the daemon's journal (``journalctl -u
nvml-watchdog``) and the newcomer's terminal both show it. Slack, PagerDuty and
Alertmanager notifiers build on the same ``(state, incident)`` calls.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TextIO

from watchdog.incident import Incident
from watchdog.report.table import duration, gpu_list


def gpus_phrase(gpus: list[str]) -> str:
    """``["0","1","2","3","5"]`` -> ``"GPUs 0-3,5"``; one GPU -> ``"GPU 3"``."""
    if not gpus:
        return "node"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + gpu_list(gpus)


class ConsoleNotifier:
    """Prints one line per transition: time, FIRING/RESOLVED, severity, kind, GPUs, summary."""

    def __init__(self, stream: TextIO | None = None, color: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.color = self.stream.isatty() if color is None else color

    def __call__(self, state: str, inc: Incident) -> None:
        when = inc.fired_at if state == "firing" else inc.resolved_at
        stamp = datetime.fromtimestamp(when or inc.started_at, tz=UTC).strftime("%H:%M:%S")
        if state == "firing":
            head = f"FIRING   {inc.severity.upper():8}"
            tail = f"(condition since {duration((inc.fired_at or 0) - inc.started_at)} earlier)"
            colour = "\033[1;31m" if inc.severity == "critical" else "\033[1;33m"
        else:
            head = f"RESOLVED {'':8}"
            tail = f"(lasted {duration((inc.resolved_at or 0) - inc.started_at)})"
            colour = "\033[1;32m"
        where = gpus_phrase(inc.gpus)
        # a summary that names its GPUs itself ("GPU 7 XID 13") gets no second prefix
        prefix = "" if inc.summary.startswith(("GPU ", "GPUs ")) else f" {where}:"
        line = f"{stamp}Z {head} {inc.kind:16} {inc.host}{prefix} {inc.summary} {tail}"
        if self.color:
            line = f"{colour}{line}\033[0m"
        print(line, file=self.stream, flush=True)
