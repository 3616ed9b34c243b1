"""``type: pagerduty``: Events API v2 through PagerDuty's official client (``pagerduty``).

Each alert whose state changed is one event: ``trigger`` while it fires (again when GPUs
join: PagerDuty folds it into the open incident), ``resolve`` when it clears, with
``dedup_key`` = the alert's fingerprint, fixed for the incident's life. A job-wide alert's
fingerprint is the job's (:mod:`watchdog.notify.fingerprint`): every node of a hung job
sends the same ``dedup_key``, so PagerDuty opens one incident for the job; each trigger
names its node in ``custom_details.node``. Repeats are not
sent (PagerDuty keeps paging by its own escalation policy).

The client's own retry loops are switched off: a 429 would otherwise be retried inside the
call forever, blind to ``Retry-After`` and to the order of events for one key. Instead a
429 or 5xx becomes Retry (``Retry-After`` honoured to the second), a 400 Failed. Which
events of a notification were accepted is kept in the group's memory, so a retry after
half a batch never sends that half twice, and a trigger is never sent after its resolve.

The client (an ``httpx2.Client``) gets its own transport (:func:`transport`), which sends
through :func:`watchdog.notify.http.request`: one deadline per request (``timeout``,
default 10 s), replies read up to 64 KiB, a 3xx never followed (undeliverable), each
network failure with its own message naming the host only; ``ca_file`` (a relay with a
private CA) and the proxy environment variables are honoured there.

``watchdog alerts test`` (reason ``test``) triggers a clearly marked info event and then
resolves it with the same ``dedup_key``, so a test leaves no open incident; it counts as
delivered only when both were accepted.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from watchdog.errors import InputError
from watchdog.escape import line
from watchdog.notify import http, render
from watchdog.notify.base import Accepted, Alert, Failed, Notification, Result, Retry
from watchdog.notify.sinks.common import (
    ca_context,
    check_keys,
    clean,
    failure_result,
    positive,
    retry_after,
    secret,
)
from watchdog.untyped import JsonDoc

if TYPE_CHECKING:
    import httpx2
    from pagerduty import EventsApiV2Client

SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}


class _RateLimited(Exception):
    def __init__(self, response: httpx2.Response) -> None:
        super().__init__("429")
        self.response = response


def transport(deadline_s: float, ssl_context: ssl.SSLContext | None) -> httpx2.BaseTransport:
    """An ``httpx2`` transport sending each request through the guarded request. A 3xx is
    raised as a transport error caused by HttpFailure("redirect") (so no client follows
    it), every HttpFailure as the matching ``httpx2`` exception with the failure as its
    cause (:func:`_pd_error` finds it there)."""
    import httpx2

    kinds = {"deadline": httpx2.TimeoutException, "dns": httpx2.ConnectError,
             "refused": httpx2.ConnectError, "connect": httpx2.ConnectError,
             "tls": httpx2.ConnectError, "tls_verify": httpx2.ConnectError,
             "reset": httpx2.ReadError, "protocol": httpx2.RemoteProtocolError,
             "proxy": httpx2.ProxyError}
    drop = {b"accept-encoding", b"connection", b"content-length"}

    class GuardedTransport(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            headers = [(k.decode("latin-1"), v.decode("latin-1"))
                       for k, v in request.headers.raw if k.lower() not in drop]
            url = str(request.url)
            try:
                r = http.request(request.method, url, request.read(), headers,
                                 deadline_s=deadline_s, ssl_context=ssl_context)
                if 300 <= r.status < 400:
                    raise http.HttpFailure("redirect", http.redirect_message(
                        r.status, r.headers.get("Location"), url))
            except http.HttpFailure as e:
                raise kinds.get(e.kind, httpx2.TransportError)(e.message,
                                                               request=request) from e
            keep = [(k, v) for k, v in r.headers.items() if k.lower() not in
                    ("content-encoding", "transfer-encoding", "content-length")]
            return httpx2.Response(r.status, headers=keep, content=r.body, request=request)

    return GuardedTransport()


def _client(routing_key: str, url: str | None, timeout: float,
            ssl_context: ssl.SSLContext | None) -> EventsApiV2Client:
    from pagerduty import EventsApiV2Client

    class Client(EventsApiV2Client):
        def postprocess(self, response: httpx2.Response) -> None:  # called on every reply
            if response.status_code == 429:
                raise _RateLimited(response)

    c = Client(routing_key, base_url=url, transport=transport(timeout, ssl_context),
               trust_env=False)
    c.retry = {}
    c.max_network_attempts = 0
    c.timeout = timeout  # type: ignore[assignment]  # typed int there; httpx2 takes float s
    return c


def payload(a: Alert, now: float | None = None) -> JsonDoc:
    """The event's payload: what the on-call person sees in PagerDuty."""
    summary = line(a.summary)
    details: JsonDoc = {
        "summary": summary, "gpus": list(a.gpus), "uuids": [line(u) for u in a.uuids],
        "rule": a.rule, "evidence": render.evidence(a) or "", "values": a.evidence}
    if a.job_id:
        details["job"] = line(a.job_id)
        details["node"] = line(a.host)
    if a.runbook_url:
        details["runbook"] = render.runbook_text(a)
    return {"summary": render.headline(a, now)[:300] + ": " + summary[:700],
            "source": line(a.host), "severity": SEVERITY.get(a.severity, "error"),
            "component": render.gpu_list(a.gpus), "group": line(a.job_id or a.host),
            "class": a.kind, "custom_details": details}


@dataclass
class PagerDutySink:
    name: str
    client: EventsApiV2Client
    type: str = "pagerduty"
    rate_per_s: float | None = 2.0  # 120 events per minute per routing key
    resend_interval: float | None = None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        if n.reason in ("repeat", "refresh"):
            return Accepted(memory)
        mem = dict(memory)
        last: dict[str, str] = dict(mem.get("last", {}))
        done: list[str] = list(mem.get("done", [])) if mem.get("done_for") == n.id else []
        if n.reason in ("meta", "test"):
            return self._own(n, mem, done)
        todo = [a for a in n.alerts if a.fingerprint in n.changed and a.fingerprint not in done]
        for a in todo:
            try:
                if a.status == "resolved":
                    self.client.send_event("resolve", dedup_key=a.fingerprint)
                    last[a.fingerprint] = "resolve"
                else:
                    link = render.runbook_link(a)  # a local path is no link
                    links = [{"href": link, "text": "runbook"}] if link else []
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

    def _own(self, n: Notification, mem: JsonDoc, done: list[str]) -> Result:
        """The agent's own message: ``meta`` one trigger (the agent's trouble stays open
        until someone looks); ``test`` a trigger then its resolve (same dedup_key), both
        needed for Accepted, so a test leaves no incident open."""
        key = f"watchdog-{n.reason}-{n.id}"
        steps = [("meta", "trigger")] if n.reason == "meta" else [
            ("test-trigger", "trigger"), ("test-resolve", "resolve")]
        for mark, action in steps:
            if mark in done:
                continue
            try:
                if action == "trigger":
                    self.client.send_event("trigger", payload={
                        "summary": line(f"nvml-watchdog {n.reason}: {n.text}")[:1000],
                        "source": n.group_key, "severity": "info" if n.reason == "test"
                        else "warning"}, dedup_key=key)
                else:
                    self.client.send_event("resolve", dedup_key=key)
            except Exception as e:  # noqa: BLE001 - mapped below
                mem.update(done=done, done_for=n.id)
                result = _pd_error(e, mem)
                if "test-trigger" in done:  # say that an incident is open
                    result = replace(result, error=f"{result.error}; the test incident {key} "
                                     "was triggered but not resolved: resolve it in PagerDuty")
                return result
            done.append(mark)
        mem.update(done=done, done_for=n.id)
        return Accepted(mem, "accepted: " + ", then ".join(
            ("trigger" if m.endswith("trigger") or m == "meta" else "resolve")
            for m, _ in steps) + f" (dedup_key {key})")

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing anyway
            pass


def _failure_of(e: BaseException) -> http.HttpFailure | None:
    """The HttpFailure behind a client exception (pagerduty's Error from httpx2's)."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, http.HttpFailure):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _pd_error(e: Exception, memory: JsonDoc) -> Retry | Failed:
    from pagerduty.errors import Error, HttpError

    failure = _failure_of(e)
    if failure is not None:
        return failure_result(failure, "pagerduty: ", memory)
    if isinstance(e, _RateLimited):
        return Retry("pagerduty: rate limited (429)",
                     retry_after(e.response.headers.get("Retry-After")), memory)
    if isinstance(e, HttpError) and e.response is not None:
        status = e.response.status_code
        body = clean(e.response.text)[:200]
        if status >= 500 or status in (408, 429):
            return Retry(f"pagerduty: HTTP {status}",
                         retry_after(e.response.headers.get("Retry-After")), memory)
        return Failed(f"pagerduty: HTTP {status}: {body}", memory)
    if isinstance(e, Error):
        return Retry(f"pagerduty: {clean(str(e))[:200]}", None, memory)
    return Retry(clean(f"pagerduty: {type(e).__name__}: {e}"), None, memory)


def from_config(name: str, options: JsonDoc, where: str) -> PagerDutySink:
    check_keys(options, {"routing_key", "routing_key_env", "routing_key_file", "url",
                         "timeout", "ca_file"}, where)
    key = secret(options, "routing_key", where)
    url = options.get("url")  # the enqueue URL (DESIGN.md), e.g. a relay's
    if url is not None:
        url = str(url).rstrip("/").removesuffix("/v2/enqueue")
    if url is not None and not str(url).startswith("https://"):
        raise InputError(f"{where}.url: must be an https:// URL (PagerDuty's client refuses "
                         "anything else)")
    return PagerDutySink(name, _client(str(key), url, positive(options, "timeout", 10.0, where)
                                       or 10.0, ca_context(options, where)))
