"""``type: slack``: one Slack thread per incident group, with slack-sdk.

Bot token (``token_env``/``token_file`` and ``channel``): the first notification of a
group is a ``chat.postMessage``; every later one (a GPU joined, resolved, a repeat)
``chat.update``s that message, so the channel always shows the current state, and adds a
threaded reply saying what changed, so the history is in the thread. Channel and ``ts``
live in the group's memory in the state database, so this survives restarts.
Incoming webhook (``webhook_url_env``/``webhook_url_file``): a new message each time.

The real slack-sdk clients build the requests and read the replies, but their transport
is :func:`watchdog.notify.http.request` (one small override per client, below): one
deadline per request (``timeout``, default 10 s), replies read up to 64 KiB, a redirect
never followed (Failed: the token would go along), each network failure with its own
message naming the host only. Nothing is retried inside the client (no retry handlers,
a 429 included): a failure is returned as Retry (``Retry-After`` honoured), so the outbox
keeps the order, the backoff and the per-channel rate (1 message per second) in one place.
slack-sdk's own log lines print the incoming-webhook URL (the secret): every secret is
registered with :mod:`watchdog.logs`, whose filter removes it from every log record.

Every text that reaches Slack is escaped for its medium (:mod:`watchdog.escape`): what goes
into ``mrkdwn`` through :func:`watchdog.escape.slack` (no mention, link, quote or
formatting from a job id, a GPU, a summary or a reply), sent with ``verbatim: true`` (no
bare URL or ``@here`` made a link or a mention); a ``plain_text`` header through
:func:`watchdog.escape.line`, with ``emoji: false``. Only the sink's own marks (the bold
headline, the icon, the runbook link) are Slack syntax.
"""

from __future__ import annotations

import functools
import io
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from watchdog.errors import InputError
from watchdog.escape import line, slack
from watchdog.notify import http, render
from watchdog.notify.base import Accepted, Alert, Failed, Notification, Result, Retry
from watchdog.notify.sinks.common import (
    by_status,
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
    from slack_sdk import WebClient
    from slack_sdk.webhook import WebhookClient

MAX_BLOCKS = 50
SECTION_MAX = 3000
HEADER_MAX = 150
_ICON = {"critical": ":red_circle:", "warning": ":large_orange_circle:",
         "info": ":information_source:"}
#: Slack errors that retrying cannot fix.
_FATAL = {"channel_not_found", "not_in_channel", "invalid_auth", "account_inactive",
          "token_revoked", "no_permission", "missing_scope", "is_archived", "msg_too_long",
          "invalid_blocks", "message_not_found", "cant_update_message", "not_authed"}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mrkdwn(text: str) -> JsonDoc:
    """A ``mrkdwn`` text object (already escaped) that Slack takes as written: no bare URL,
    channel name or mention is made a link (``verbatim``)."""
    return {"type": "mrkdwn", "text": _cut(text, SECTION_MAX), "verbatim": True}


def alert_block(a: Alert, now: float, headline: bool = True) -> JsonDoc:
    """One alert as a section: bold headline (left out when the message's header already
    says it), the summary, then the numbers in italics."""
    icon = ":white_check_mark:" if a.status == "resolved" else _ICON.get(a.severity, "")
    lines = [f"{icon} *{slack(render.headline(a, now))}*"] if headline else []
    lines.append(slack(a.summary))
    ev = render.evidence(a)
    if ev:
        lines.append(f"_{slack(ev)}_")
    return {"type": "section", "text": mrkdwn("\n".join(lines))}


def context_block(a: Alert) -> JsonDoc:
    """Small print: GPU UUIDs, job, runbook, times."""
    bits = []
    if a.uuids:
        bits.append("GPUs " + ", ".join(f"{slack(g)}=`{slack(u)}`"
                                        for g, u in zip(a.gpus[:4], a.uuids[:4], strict=False))
                    + (f" +{len(a.uuids) - 4} more" if len(a.uuids) > 4 else ""))
    if a.job_id:
        bits.append(f"job {slack(a.job_id)}")
    if a.runbook_url:  # a link only when it is one; a path on the node says so
        link = render.runbook_link(a)
        bits.append(f"<{_link_target(link)}|runbook>" if link
                    else slack(render.runbook_text(a) or ""))
    bits.append(f"since {time.strftime('%H:%M UTC', time.gmtime(a.started_at))}")
    return {"type": "context", "elements": [mrkdwn(" · ".join(bits))]}


def _link_target(url: str) -> str:
    """A URL inside Slack's ``<url|text>``: its ``&``, ``<``, ``>`` and ``|`` (which would
    end the link or start its text) percent-encoded, nothing else changed."""
    return "".join(f"%{ord(c):02X}" if c in "&<>| " or not c.isprintable() else c
                   for c in url)


def render_blocks(n: Notification, now: float | None = None) -> JsonDoc:
    """Block Kit for ``n``: ``{"text": fallback, "blocks": [...]}`` within Slack's limits."""
    now = n.created_at if now is None else now
    if n.reason in ("meta", "test"):
        text = f":warning: nvml-watchdog: {slack(n.text)}" if n.reason == "meta" else (
            f":test_tube: nvml-watchdog test message: {slack(n.text)}")
        return {"text": _cut(text, SECTION_MAX), "blocks": [
            {"type": "section", "text": mrkdwn(text)}]}
    title = line(render.title(n, now))
    blocks: list[JsonDoc] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(title, HEADER_MAX),
                                    "emoji": False}}]
    shown = n.alerts[: (MAX_BLOCKS - 2) // 3]
    for a in shown:
        blocks += [alert_block(a, now, headline=len(n.alerts) > 1), context_block(a),
                   {"type": "divider"}]
    if len(n.alerts) > len(shown):
        blocks.append({"type": "context", "elements": [mrkdwn(
            f"+{len(n.alerts) - len(shown)} more alerts: `watchdog alerts` on the node")]})
    elif blocks[-1]["type"] == "divider":
        blocks.pop()
    return {"text": _cut(slack(title), SECTION_MAX), "blocks": blocks[:MAX_BLOCKS]}


def change_text(n: Notification, now: float) -> str:
    """The thread reply: what changed since the previous message of this group."""
    changed = [a for a in n.alerts if a.fingerprint in n.changed] or list(n.alerts)
    if n.reason == "repeat":
        return "still firing: " + "; ".join(slack(render.headline(a, now)) for a in changed)
    return "\n".join(slack(render.headline(a, now)) for a in changed)


class Guarded(Protocol):
    """What the guarded transport reads of a slack-sdk client (:func:`_clients`)."""

    deadline_s: float
    ssl: ssl.SSLContext | None
    proxy: str | None


@dataclass
class SlackSink:
    name: str
    channel: str | None
    client: WebClient | WebhookClient  # bot, or an incoming webhook (both guarded)
    type: str = "slack"
    rate_per_s: float | None = 1.0
    resend_interval: float | None = None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        now = n.created_at
        msg = render_blocks(n, now)
        if self.channel is None:
            return self._webhook(msg)
        from slack_sdk import WebClient

        client = self.client
        assert isinstance(client, WebClient)  # a bot token's sink (a channel given)
        mem = dict(memory)
        try:
            if n.reason in ("meta", "test") or "ts" not in mem:
                r = client.chat_postMessage(channel=self.channel, **msg)
                if n.reason not in ("meta", "test"):
                    mem.update(channel=r["channel"], ts=r["ts"])
                return Accepted(mem, line(f"ok from {http.host_of(client.base_url)} "
                                          f"(channel {r.get('channel')}, ts {r.get('ts')})"))
            if mem.get("updated_for") != n.id:
                client.chat_update(channel=mem["channel"], ts=mem["ts"], **msg)
                mem["updated_for"] = n.id
            client.chat_postMessage(channel=mem["channel"], thread_ts=mem["ts"],
                                         text=_cut(change_text(n, now), SECTION_MAX))
            return Accepted(mem)
        except Exception as e:  # noqa: BLE001 - mapped onto Retry/Failed below
            return _slack_error(e, mem)

    def _webhook(self, msg: JsonDoc) -> Result:
        from slack_sdk.webhook import WebhookClient

        client = self.client
        assert isinstance(client, WebhookClient)  # an incoming webhook's sink
        try:
            r = client.send(text=msg["text"], blocks=msg["blocks"])
        except http.HttpFailure as e:
            return failure_result(e, "slack webhook: ")
        except Exception as e:  # noqa: BLE001 - anything else the client raises
            return Retry(clean(f"slack webhook: {type(e).__name__}: {e}"))
        result = by_status(r.status_code, str(r.body), r.headers, what="slack webhook: ")
        if isinstance(result, Accepted):
            return Accepted(result.memory, f"HTTP {r.status_code}: {line(str(r.body)[:40])}")
        return result

    def close(self) -> None:
        return None


def _slack_error(e: Exception, memory: JsonDoc) -> Result:
    from slack_sdk.errors import SlackApiError

    if isinstance(e, http.HttpFailure):
        return failure_result(e, "slack: ", memory)
    if isinstance(e, SlackApiError):
        resp = e.response
        status = getattr(resp, "status_code", 0)
        err = (resp.data or {}).get("error", "") if isinstance(resp.data, dict) else ""
        if status == 429 or err == "ratelimited":
            return Retry("slack: rate limited (429)",
                         retry_after(resp.headers.get("Retry-After") or
                                     resp.headers.get("retry-after")), memory)
        if err in _FATAL or (400 <= status < 500 and status not in (408, 429)):
            return Failed(f"slack: {err or status}", memory)
        return Retry(clean(f"slack: {err or status}"), None, memory)
    return Retry(clean(f"slack: {type(e).__name__}: {e}"), None, memory)


# --- the transport -----------------------------------------------------------------------
def _guarded(client: Guarded, url: str, req: urllib.request.Request
             ) -> tuple[http.Reply, str]:
    """``req`` (the urllib Request slack-sdk built) through the guarded request: the reply
    and its body as text. A 3xx raises HttpFailure("redirect") (never followed; not an
    OSError, so no retry handler would retry it), another non-2xx urllib's HTTPError, which
    is what slack-sdk expects from urlopen (it then reads the status, headers and body)."""
    data = req.data
    assert data is None or isinstance(data, bytes)  # slack-sdk sends its body as bytes
    r = http.request(req.get_method(), url, data, req.header_items(),
                     deadline_s=client.deadline_s, ssl_context=client.ssl, proxy=client.proxy)
    if 300 <= r.status < 400:
        raise http.HttpFailure("redirect", http.redirect_message(r.status,
                                                                 r.headers.get("Location"), url))
    if not 200 <= r.status < 300:
        raise urllib.error.HTTPError(url, r.status, r.reason, r.headers, io.BytesIO(r.body))
    return r, r.body.decode(r.headers.get_content_charset() or "utf-8", errors="replace")


@functools.cache
def _clients() -> tuple[type, type]:
    """slack-sdk's WebClient and WebhookClient with their one transport method replaced.

    ``WebClient._perform_urllib_http_request_internal(url, req)`` (returns ``{"status",
    "headers", "body": str}``) and ``WebhookClient._perform_http_request_internal(url,
    req)`` (returns a WebhookResponse) are where every slack-sdk since the retry handlers
    came (3.x; this project allows >=3.26, checked on 3.48) calls urlopen. If a release
    stops calling them, tests/test_hostile_sinks.py fails: a trickling server is no longer
    cut at the deadline."""
    from slack_sdk import WebClient
    from slack_sdk.webhook import WebhookClient, WebhookResponse

    class GuardedWebClient(WebClient):
        deadline_s = 10.0

        def _perform_urllib_http_request_internal(self, url: str,
                                                  req: urllib.request.Request) -> JsonDoc:
            r, text = _guarded(self, url, req)
            return {"status": r.status, "headers": r.headers, "body": text}

    class GuardedWebhookClient(WebhookClient):
        deadline_s = 10.0

        def _perform_http_request_internal(self, url: str,
                                           req: urllib.request.Request) -> WebhookResponse:
            r, text = _guarded(self, url, req)
            return WebhookResponse(url=url, status_code=r.status, body=text,
                                   headers=dict(r.headers.items()))

    return GuardedWebClient, GuardedWebhookClient


def from_config(name: str, options: JsonDoc, where: str) -> SlackSink:
    check_keys(options, {"token", "token_env", "token_file", "channel", "webhook_url",
                         "webhook_url_env", "webhook_url_file", "api_url", "timeout",
                         "ca_file"}, where)
    deadline = positive(options, "timeout", 10.0, where) or 10.0
    ctx = ca_context(options, where)
    web_client, webhook_client = _clients()
    # no retry handlers: the outbox retries (in order, with backoff, honouring Retry-After)
    common: JsonDoc = {"timeout": max(1, round(deadline)), "ssl": ctx, "retry_handlers": []}
    if options.get("webhook_url_env") or options.get("webhook_url_file"):
        if options.get("channel") or options.get("token_env") or options.get("token_file"):
            raise InputError(f"{where}: an incoming webhook posts to its own channel: give "
                             "webhook_url_env/_file, or token_env/_file with channel")
        url = secret(options, "webhook_url", where)
        client = webhook_client(url, **common)
        client.deadline_s = deadline
        return SlackSink(name, None, client)
    token = secret(options, "token", where)
    channel = options.get("channel")
    if not isinstance(channel, str) or not channel:
        raise InputError(f"{where}: needs channel (e.g. \"#gpu-alerts\" or a channel id)")
    base = str(options.get("api_url", "https://slack.com/api/"))
    client = web_client(token=token, base_url=base if base.endswith("/") else base + "/",
                        **common)
    client.deadline_s = deadline
    return SlackSink(name, channel, client)
