"""``type: log``: every notification as lines in the agent's log (the journal under
systemd). Useful as a record next to a real sink, and for trying the policy out."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from watchdog.notify import render
from watchdog.notify.base import Accepted, Notification, Result
from watchdog.notify.sinks.common import check_keys
from watchdog.untyped import JsonDoc

log = logging.getLogger("watchdog.notify.log")


@dataclass
class LogSink:
    name: str
    type: str = "log"
    rate_per_s: float | None = None
    resend_interval: float | None = None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        log.warning("notification %s (%s, group %s): %s", n.id[:8], n.reason, n.group_key,
                    render.title(n))
        return Accepted({"sent": int(memory.get("sent", 0)) + 1}, "written to the agent's log")

    def close(self) -> None:
        return None


def from_config(name: str, options: JsonDoc, where: str) -> LogSink:
    check_keys(options, set(), where)
    return LogSink(name)
