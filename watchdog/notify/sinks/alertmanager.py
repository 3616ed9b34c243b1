"""``type: alertmanager``: post alerts to Prometheus Alertmanager's API v2.

Every notification posts the group's alerts to ``POST /api/v2/alerts``: labels
``alertname`` (the kind), ``severity``, ``node`` (the agent's ``host:``; also as ``host``
and ``instance``), ``rule``, ``fingerprint`` (fixed for the incident's life, so
Alertmanager sees one alert even as GPUs join: the GPU list is an annotation), ``job_id``
where the node knows its job, and ``gpu`` (the index) on a per-GPU rule's alert only;
``endsAt`` once resolved. A job-wide alert (``comm_hang``, ``stall``) has the job's
fingerprint, the same on every node, and its own ``node``: Alertmanager's
``group_by: [alertname, job_id]`` then makes one notification of a job's N nodes
(docs/fleet.md). Alertmanager forgets a firing alert
that is not re-sent within its ``resolve_timeout`` (5 min by default), so firing groups
are re-posted every ``resend_interval`` (default 60 s). Alertmanager then does its own
grouping, routing and silencing for the fleet.

Requests go through :func:`watchdog.notify.http.request` like the webhook's (one deadline,
``timeout``; replies capped; a redirect is undeliverable, never followed); ``ca_file``
for an Alertmanager behind a private CA. Label values go through
:func:`watchdog.escape.label`, annotations through :func:`watchdog.escape.line`.

``watchdog alerts test`` posts one ``WatchdogTest`` alert that starts and ends at once
(:func:`test_alert`): Alertmanager answers for the URL, the token and the API, and pages
nobody. The agent's own notices (``meta``) are for the sinks people read, not this one.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass

from watchdog.errors import InputError
from watchdog.escape import label, line
from watchdog.incident import iso
from watchdog.notify import render
from watchdog.notify.base import Accepted, Alert, Notification, Result
from watchdog.notify.sinks.common import ca_context, check_keys, positive, post_json, secret
from watchdog.units import parse_duration
from watchdog.untyped import JsonDoc


def am_alert(a: Alert, now: float | None = None) -> JsonDoc:
    # Alertmanager identifies an alert by its whole label set: the GPU list, which grows
    # while a node-level incident lives, is an annotation, or a GPU joining would leave a
    # stale copy firing until resolve_timeout.
    labels = {"alertname": a.kind, "severity": a.severity, "node": a.host, "host": a.host,
              "instance": a.host, "rule": a.rule, "fingerprint": a.fingerprint,
              "source": "nvml-watchdog"}
    if a.job_id:
        labels["job_id"] = a.job_id
    if a.scope == "gpu" and len(a.gpus) == 1:  # stable: a per-GPU alert never changes GPU
        labels["gpu"] = a.gpus[0]
    labels = {k: label(v) for k, v in labels.items()}
    ann = {"summary": line(a.summary), "title": render.headline(a, now),
           "gpus": line(",".join(a.gpus) or "node")}
    ev = render.evidence(a)
    if ev:
        ann["evidence"] = ev
    if a.uuids:
        ann["uuids"] = line(",".join(a.uuids))
    link = render.runbook_link(a)
    if link:
        ann["runbook_url"] = link
    elif a.runbook_url:  # a file on the node is not a link: say where it is
        ann["runbook"] = render.runbook_text(a) or a.runbook_url
    # Alertmanager refuses times ahead of its own clock ("start time must be before end
    # time"): a simulated node at --speed lives ahead of the wall clock, so its times are
    # capped at the wall clock (a real node's never are)
    wall = time.time()
    start = a.fired_at or a.started_at
    out: JsonDoc = {"labels": labels, "annotations": ann,
                           "startsAt": iso(min(start, wall) if start is not None else None)}
    if a.status == "resolved":
        out["endsAt"] = iso(min(a.resolved_at, wall) if a.resolved_at is not None else None)
    return out


def test_alert(n: Notification) -> JsonDoc:
    """``watchdog alerts test``: one alert ``WatchdogTest`` (severity ``info``) that starts
    and ends now. Alertmanager checks and stores it like any alert (so the URL, the token
    and the API version are all tried), and notifies nobody: an alert resolved before it
    was ever notified is not sent (its dedup stage)."""
    now = iso(time.time())
    host = n.group_key.removeprefix("agent/")
    return {"labels": {k: label(v) for k, v in {
                "alertname": "WatchdogTest", "severity": "info", "node": host, "host": host,
                "instance": host, "fingerprint": f"watchdog-test-{n.id[:16]}",
                "source": "nvml-watchdog"}.items()},
            "annotations": {"summary": line(n.text or "test")}, "startsAt": now,
            "endsAt": now}


@dataclass
class AlertmanagerSink:
    name: str
    url: str
    headers: dict[str, str]
    timeout: float = 10.0
    type: str = "alertmanager"
    rate_per_s: float | None = None
    resend_interval: float | None = 60.0
    ssl_context: ssl.SSLContext | None = None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        if n.reason == "test":
            return post_json(self.url.rstrip("/") + "/api/v2/alerts", [test_alert(n)],
                             self.headers, self.timeout, memory, self.ssl_context)
        if n.reason == "meta":
            return Accepted(memory)  # the agent's own trouble goes to people-facing sinks
        return post_json(self.url.rstrip("/") + "/api/v2/alerts",
                         [am_alert(a, n.created_at) for a in n.alerts], self.headers,
                         self.timeout, memory, self.ssl_context)

    def close(self) -> None:
        return None


def from_config(name: str, options: JsonDoc, where: str) -> AlertmanagerSink:
    check_keys(options, {"url", "timeout", "resend_interval", "token_env", "token_file",
                         "ca_file"}, where)
    url = options.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InputError(f"{where}.url: needs Alertmanager's base URL, e.g. "
                         "http://alertmanager:9093")
    token = secret(options, "token", where, required=False)
    resend = parse_duration(str(options.get("resend_interval", "60s")),
                            what=f"{where}.resend_interval")
    return AlertmanagerSink(name, url, {"Authorization": f"Bearer {token}"} if token else {},
                            positive(options, "timeout", 10.0, where), resend_interval=resend,
                            ssl_context=ca_context(options, where))
