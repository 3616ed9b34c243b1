"""``type: pagerduty``: Events API v2 through PagerDuty's official client (``pagerduty``).

Each alert whose state changed is one event: ``trigger`` while it fires (again when GPUs
join: PagerDuty folds it into the open incident), ``resolve`` when it clears, with
``dedup_key`` = the alert's fingerprint, fixed for the incident's life. Repeats are not
sent (PagerDuty keeps paging by its own escalation policy).

The client's own retry loops are switched off: a 429 would otherwise be retried inside the
call forever, blind to ``Retry-After`` and to the order of events for one key. Instead a
429 or 5xx becomes Retry (``Retry-After`` honoured to the second), a 400 Failed. Which
events of a notification were accepted is kept in the group's memory, so a retry after
half a batch never sends that half twice, and a trigger is never sent after its resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.errors import InputError
from watchdog.notify import render
from watchdog.notify.base import Accepted, Alert, Failed, Notification, Result, Retry
from watchdog.notify.sinks.common import check_keys, positive, retry_after, secret

SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}


class _RateLimited(Exception):
    def __init__(self, response: Any) -> None:
        super().__init__("429")
        self.response = response


def _client(routing_key: str, url: str | None, timeout: float, ca_file: str | None) -> Any:
    from pagerduty import EventsApiV2Client

    class Client(EventsApiV2Client):  # type: ignore[misc]
        def postprocess(self, response: Any) -> None:  # called on every reply
            if response.status_code == 429:
                raise _RateLimited(response)

    kw: dict[str, Any] = {}
    if ca_file:  # a private CA (an egress proxy in front of PagerDuty; the tests' server)
        import ssl

        kw["verify"] = ssl.create_default_context(cafile=ca_file)
    c = Client(routing_key, base_url=url, **kw)
    c.retry = {}
    c.max_network_attempts = 0
    c.timeout = timeout
    return c


def payload(a: Alert, now: float | None = None) -> dict[str, Any]:
    """The event's payload: what the on-call person sees in PagerDuty."""
    details = {"summary": a.summary, "gpus": list(a.gpus), "uuids": list(a.uuids),
               "rule": a.rule, "evidence": a.evidence}
    if a.job_id:
        details["job"] = a.job_id
    return {"summary": render.headline(a, now)[:300] + ": " + a.summary[:700],
            "source": a.host, "severity": SEVERITY.get(a.severity, "error"),
            "component": render.gpu_list(a.gpus), "group": a.job_id or a.host,
            "class": a.kind, "custom_details": details}


@dataclass
class PagerDutySink:
    name: str
    client: Any
    type: str = "pagerduty"
    rate_per_s: float | None = 2.0  # 120 events per minute per routing key
    resend_interval: float | None = None

    def send(self, n: Notification, memory: dict[str, Any]) -> Result:
        if n.reason in ("repeat", "refresh"):
            return Accepted(memory)
        mem = dict(memory)
        last: dict[str, str] = dict(mem.get("last", {}))
        done: list[str] = list(mem.get("done", [])) if mem.get("done_for") == n.id else []
        if n.reason in ("meta", "test"):
            todo: list[Alert | None] = [None] if not done else []
        else:
            todo = [a for a in n.alerts if a.fingerprint in n.changed and
                    a.fingerprint not in done]
        for a in todo:
            try:
                if a is None:
                    self.client.send_event("trigger", payload={
                        "summary": f"nvml-watchdog {n.reason}: {n.text}"[:1000],
                        "source": n.group_key, "severity": "info" if n.reason == "test"
                        else "warning"}, dedup_key=f"watchdog-{n.reason}-{n.id}")
                    done.append("meta")
                    continue
                if a.status == "resolved":
                    self.client.send_event("resolve", dedup_key=a.fingerprint)
                    last[a.fingerprint] = "resolve"
                else:
                    links = [{"href": a.runbook_url, "text": "runbook"}] if (
                        a.runbook_url or "").startswith("http") else []
                    self.client.send_event("trigger", dedup_key=a.fingerprint,
                                           payload=payload(a, n.created_at),
                                           links=links)
                    last[a.fingerprint] = "trigger"
                done.append(a.fingerprint)
            except Exception as e:  # noqa: BLE001 - mapped below
                mem.update(last=last, done=done, done_for=n.id)
                return _pd_error(e, mem)
        mem.update(last=last, done=done, done_for=n.id)
        return Accepted(mem)

    def close(self) -> None:
        return None


def _pd_error(e: Exception, memory: dict[str, Any]) -> Result:
    from pagerduty.errors import Error, HttpError

    if isinstance(e, _RateLimited):
        return Retry("pagerduty: rate limited (429)",
                     retry_after(e.response.headers.get("Retry-After")), memory)
    if isinstance(e, HttpError):
        status = e.response.status_code
        body = e.response.text[:200]
        if status >= 500 or status in (408, 429):
            return Retry(f"pagerduty: HTTP {status}",
                         retry_after(e.response.headers.get("Retry-After")), memory)
        return Failed(f"pagerduty: HTTP {status}: {body}", memory)
    if isinstance(e, Error):
        return Retry(f"pagerduty: {str(e)[:200]}", None, memory)
    return Retry(f"pagerduty: {type(e).__name__}: {e}", None, memory)


def from_config(name: str, options: dict[str, Any], where: str) -> PagerDutySink:
    check_keys(options, {"routing_key", "routing_key_env", "routing_key_file", "url",
                         "timeout", "ca_file"}, where)
    key = secret(options, "routing_key", where)
    url = options.get("url")  # the enqueue URL (DESIGN.md), e.g. a relay's
    if url is not None:
        url = str(url).rstrip("/").removesuffix("/v2/enqueue")
    if url is not None and not str(url).startswith("https://"):
        raise InputError(f"{where}.url: must be an https:// URL (PagerDuty's client refuses "
                         "anything else)")
    ca = options.get("ca_file")
    if ca is not None and not Path(str(ca)).is_file():
        raise InputError(f"{where}.ca_file: {ca} is not a file")
    return PagerDutySink(name, _client(str(key), url, positive(options, "timeout", 10.0, where),
                                       None if ca is None else str(ca)))
