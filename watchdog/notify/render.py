"""Words for people: the headline and lines every sink builds its message from.

Written for an on-call engineer reading a phone at 3 a.m.: the severity, the kind, the host
and how many GPUs come first; then what the rule saw, in its own summary; then how long,
the job, and where the runbook is. Nothing here is a secret or a wall of JSON.
"""

from __future__ import annotations

import time
from typing import Any

from watchdog.notify.base import Alert, Notification
from watchdog.report import table

#: Evidence keys in words a person reads at 3 a.m., with units (others: key as written).
_EVIDENCE = {
    "util": ("utilization", "%"), "power": ("power", "W"), "busy_w": ("normal busy power", "W"),
    "idle_w": ("idle power", "W"), "temp": ("temperature", "C"),
    "mem_temp": ("HBM temperature", "C"), "sm_clock_pct": ("SM clock", "% of max"),
    "mem_pct": ("memory used", "%"), "sm_activity": ("SM activity", "%"),
    "learned_longest_s": ("longest normal wait", "s"), "xid": ("XID", ""),
    "code": ("code", ""),
}


def gpu_list(gpus: tuple[str, ...] | list[str]) -> str:
    """``("0","1","2","5")`` -> ``"GPUs 0-2,5"``; one GPU -> ``"GPU 3"``; none -> ``"node"``."""
    if not gpus:
        return "node"
    return ("GPU " if len(gpus) == 1 else "GPUs ") + table.gpu_list(gpus)


def ago(seconds: float) -> str:
    """``75`` -> ``"1 min"``, ``5400`` -> ``"1 h 30 min"``, ``20`` -> ``"20 s"``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    h, m = divmod(s // 60, 60)
    return f"{h} h {m} min" if m else f"{h} h"


def headline(a: Alert, now: float | None = None) -> str:
    """``CRITICAL comm_hang on node7, GPUs 0-7, for 12 min`` or ``RESOLVED …``.

    ``now`` is the agent's clock when the notification was made (``created_at``), not the
    wall clock: a simulated node's incidents live in simulated time."""
    now = time.time() if now is None else now
    start = a.started_at
    if a.status == "resolved":
        took = ago((a.resolved_at or now) - start)
        return f"RESOLVED {a.kind} on {a.host}, {gpu_list(a.gpus)}, after {took}"
    return f"{a.severity.upper()} {a.kind} on {a.host}, {gpu_list(a.gpus)}, for {ago(now - start)}"


def evidence(a: Alert, limit: int = 6) -> str:
    """The numbers the rule decided on, in words: ``utilization 100 % · power 105 W``."""
    out = []
    for k, v in a.evidence.items():
        if len(out) >= limit:
            break
        if isinstance(v, bool) or v is None or isinstance(v, dict | list):
            continue
        label, unit = _EVIDENCE.get(k, (k.replace("_", " "), ""))
        val = f"{v:.0f}" if isinstance(v, float) and abs(v) >= 10 else (
            f"{v:.2g}" if isinstance(v, float) else str(v))
        out.append(f"{label} {val}{(' ' + unit) if unit else ''}")
    return " · ".join(out)


def alert_lines(a: Alert, now: float | None = None) -> list[str]:
    """Headline, then the summary, numbers, GPU UUIDs, job and runbook, one per line."""
    lines = [headline(a, now), a.summary]
    ev = evidence(a)
    if ev:
        lines.append(f"evidence: {ev}")
    if a.uuids:
        shown = ", ".join(f"{g}={u}" for g, u in zip(a.gpus[:8], a.uuids[:8], strict=False))
        more = f" (+{len(a.uuids) - 8} more)" if len(a.uuids) > 8 else ""
        lines.append(f"GPUs: {shown}{more}")
    if a.job_id:
        lines.append(f"job: {a.job_id}")
    if a.runbook_url:
        lines.append(f"runbook: {a.runbook_url}")
    return lines


def title(n: Notification, now: float | None = None) -> str:
    """One line for the whole group (a Slack fallback, an email subject)."""
    now = n.created_at if now is None else now
    if n.reason in ("meta", "test"):
        return n.text or n.reason
    firing = [a for a in n.alerts if a.status == "firing"]
    if not firing:
        a = n.alerts[0]
        more = f" (+{len(n.alerts) - 1} more)" if len(n.alerts) > 1 else ""
        return headline(a, now) + more
    worst = sorted(firing, key=lambda a: ("critical", "warning", "info").index(a.severity))[0]
    more = f" (+{len(firing) - 1} more firing)" if len(firing) > 1 else ""
    return headline(worst, now) + more


def as_text(n: Notification, now: float | None = None) -> str:
    """The whole notification as plain text (log sink, webhook ``text``)."""
    now = n.created_at if now is None else now
    if n.reason in ("meta", "test"):
        return f"[nvml-watchdog] {n.text}"
    blocks = ["\n".join(alert_lines(a, now)) for a in n.alerts]
    return "\n\n".join(blocks)


def jsonable_alert(a: Alert) -> dict[str, Any]:
    from dataclasses import asdict

    from watchdog.incident import iso

    d = asdict(a)
    for k in ("started_at", "fired_at", "resolved_at"):
        d[k] = iso(d[k])
    d["gpus"], d["uuids"] = list(a.gpus), list(a.uuids)
    return d
