"""``type: webhook``: one JSON POST per notification, in Alertmanager's webhook shape.

The body is what an Alertmanager webhook receiver expects (``version: "4"``, ``groupKey``,
``status``, ``receiver``, ``groupLabels``, ``commonLabels``, ``commonAnnotations``,
``alerts`` with ``labels``, ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``), so
existing receivers work unchanged, plus our own fields: ``id`` (stable across retries, so a
receiver can drop repeats), ``reason``, ``title``, ``text`` (ready to show), ``changed``
and, per alert, the full ``incident``. 2xx is delivered; 408, 425, 429 and 5xx are
retried (``Retry-After`` honoured); any other 4xx is undeliverable, and so is a redirect:
it is never followed (the token would go along), the message names the Location's host.

Every request goes through :func:`watchdog.notify.http.request`: one deadline for the whole
exchange (``timeout``, default 10 s), replies read up to 64 KiB, each failure mode with its
own message (cannot resolve, refused, TLS not trusted, deadline passed, reset, too large).
Error messages name the host only, never the URL's path or query (a webhook URL often is
the secret: an inline ``url:`` is treated as one too and never appears in a log line).
``ca_file``: the CA of a receiver with a private certificate.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from watchdog.errors import InputError
from watchdog.notify import render
from watchdog.notify.base import Notification, Result
from watchdog.notify.sinks.alertmanager import am_alert
from watchdog.notify.sinks.common import (
    ca_context,
    check_keys,
    keep_secret,
    positive,
    post_json,
    secret,
)
from watchdog.untyped import JsonDoc


def body(n: Notification, receiver: str = "webhook") -> JsonDoc:
    firing = any(a.status == "firing" for a in n.alerts)
    alerts = []
    for a in n.alerts:
        d = am_alert(a, n.created_at)
        d.update(status=a.status, fingerprint=a.fingerprint, generatorURL="",
                 endsAt=d.get("endsAt") or "0001-01-01T00:00:00Z",
                 incident=render.jsonable_alert(a))
        alerts.append(d)
    labels = [x["labels"] for x in alerts]
    common = {k: v for k, v in labels[0].items() if all(x.get(k) == v for x in labels)} \
        if labels else {}
    anns = [x["annotations"] for x in alerts]
    common_ann = {k: v for k, v in anns[0].items() if all(x.get(k) == v for x in anns)} \
        if anns else {}
    host = n.alerts[0].host if n.alerts else n.group_key
    return {"version": "4", "groupKey": n.group_key, "truncatedAlerts": 0,
            "status": "firing" if firing else "resolved", "receiver": receiver,
            "groupLabels": {"host": host}, "commonLabels": common,
            "commonAnnotations": common_ann, "externalURL": "", "alerts": alerts,
            "id": n.id, "reason": n.reason, "group_key": n.group_key,
            "title": render.title(n), "text": render.as_text(n), "changed": list(n.changed)}


@dataclass
class WebhookSink:
    name: str
    url: str
    headers: dict[str, str]
    timeout: float = 10.0
    type: str = "webhook"
    rate_per_s: float | None = None
    resend_interval: float | None = None
    ssl_context: ssl.SSLContext | None = None

    def send(self, n: Notification, memory: JsonDoc) -> Result:
        return post_json(self.url, body(n, self.name), self.headers, self.timeout, memory,
                         self.ssl_context)

    def close(self) -> None:
        return None


def from_config(name: str, options: JsonDoc, where: str) -> WebhookSink:
    check_keys(options, {"url", "url_env", "url_file", "token_env", "token_file", "timeout",
                         "rate_per_s", "ca_file"}, where)
    url = options.get("url") or secret(options, "url", where)
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InputError(f"{where}.url: must be an http(s) URL")
    keep_secret(url)  # an inline webhook URL is a secret all the same
    token = secret(options, "token", where, required=False)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    rate = positive(options, "rate_per_s", None, where)
    return WebhookSink(name, url, headers, positive(options, "timeout", 10.0, where),
                       rate_per_s=rate, ssl_context=ca_context(options, where))

