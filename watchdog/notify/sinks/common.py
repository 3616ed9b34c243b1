"""What every sink needs: secrets from the environment or a file, option checks, and HTTP
replies mapped onto Accepted / Retry / Failed.

Every secret read here is registered with :func:`watchdog.logs.register_secret`, so no
log line of any library ever prints it; the texts of Retry and Failed (logged, stored in
the state database, shown by ``watchdog status``) are built from the host only and have
registered secrets removed again (:func:`clean`) where they quote a reply or an exception.
"""

from __future__ import annotations

import json
import math
import os
import re
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from http.client import HTTPMessage
from pathlib import Path
from typing import overload

from watchdog.errors import InputError
from watchdog.logs import redact, register_secret
from watchdog.notify import http
from watchdog.notify.base import Accepted, Failed, Result, Retry
from watchdog.notify.http import HttpFailure, redirect_message
from watchdog.untyped import Json, JsonDoc


def secret(options: JsonDoc, key: str, where: str, *, required: bool = True) -> str | None:
    """``KEY_env: NAME`` or ``KEY_file: PATH`` -> the secret (never printed; never inline)."""
    if key in options:
        raise InputError(f"{where}.{key}: secrets never go in the config: use {key}_env "
                         f"(an environment variable) or {key}_file (a file, mode 0600)")
    env, file = options.get(f"{key}_env"), options.get(f"{key}_file")
    if env and file:
        raise InputError(f"{where}: give {key}_env or {key}_file, not both")
    if env:
        value = os.environ.get(str(env), "").strip()
        if not value:
            raise InputError(f"{where}.{key}_env: environment variable {env} is not set")
        _one_line(value, f"{where}.{key}_env: environment variable {env}")
        keep_secret(value)
        return value
    if file:
        p = Path(str(file)).expanduser()
        try:
            mode = p.stat().st_mode
            if mode & 0o077:
                raise InputError(f"{where}.{key}_file: {p} is readable by others (mode "
                                 f"{mode & 0o777:o}); make it 0600, owned by the service's user")
            value = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise InputError(f"{where}.{key}_file: cannot read {p}: {e.strerror or e}") from None
        if not value:
            raise InputError(f"{where}.{key}_file: {p} is empty")
        _one_line(value, f"{where}.{key}_file: {p}")
        keep_secret(value)
        return value
    if required:
        raise InputError(f"{where}: needs {key}_env or {key}_file")
    return None


def _one_line(value: str, where: str) -> None:
    """A secret is one line of printable text: a token with a line break inside (two
    tokens pasted into one file, a key wrapped by an editor) or a control character can
    never work (it cannot go into an HTTP header), so it is a configuration error at once,
    not a delivery retried for ever. The message never quotes the secret."""
    for i, c in enumerate(value):
        if not c.isprintable():
            what = "a line break" if c in "\r\n" else f"a control character (U+{ord(c):04X})"
            raise InputError(f"{where} holds {what} at character {i + 1} of the secret: a "
                             "secret is one line; fix it and restart (or reload)")


def keep_secret(value: str) -> None:
    """Never log ``value``; for a URL (a webhook's: its path is the secret) its path and
    query on their own too, since a receiver may quote them back in a reply."""
    register_secret(value)
    if value.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(value)
        register_secret(parts.path + (f"?{parts.query}" if parts.query else ""))


@overload
def positive(options: JsonDoc, key: str, default: float, where: str) -> float: ...
@overload
def positive(options: JsonDoc, key: str, default: None, where: str) -> float | None: ...
def positive(options: JsonDoc, key: str, default: float | None,
             where: str) -> float | None:
    """A positive number option (``timeout: 10``, seconds), or a one-line InputError."""
    v = options.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise InputError(f"{where}.{key}: must be a positive number, not {v!r}")
    return float(v)


def check_keys(options: JsonDoc, allowed: set[str], where: str) -> None:
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InputError(f"{where}.{unknown[0]}: unknown option (known: "
                         f"{', '.join(sorted(allowed))})")


_SECONDS = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), None if absent or not
    understood (the worker's backoff applies then). Never raises: a negative value or a
    date in the past is 0, an absurd one stays absurd (``inf`` included) for the delivery
    worker to cap (:data:`watchdog.notify.deliver.RETRY_AFTER_MAX_S`) and report."""
    if not value or not isinstance(value, str):
        return None
    if _SECONDS.fullmatch(value):
        v = float(value)  # a numeral of any size is a float (inf at worst), never an error
        return None if math.isnan(v) else max(0.0, v)
    try:
        when = parsedate_to_datetime(value.strip())
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError, IndexError, OSError):
        return None


def clean(text: str) -> str:
    """``text`` (a reply's excerpt, a library's exception) without any registered secret."""
    return redact(text)


def ca_file(options: JsonDoc, where: str) -> str | None:
    """``ca_file:`` (a private CA's certificate, PEM), checked to be a file."""
    ca = options.get("ca_file")
    if ca is None:
        return None
    path = Path(str(ca)).expanduser()
    if not path.is_file():
        raise InputError(f"{where}.ca_file: {ca} is not a file")
    return str(path)


def ca_context(options: JsonDoc, where: str) -> ssl.SSLContext | None:
    """The TLS context for ``ca_file:`` (a relay or receiver with a private CA), or None
    (the system's CAs)."""
    path = ca_file(options, where)
    if path is None:
        return None
    try:
        return ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise InputError(f"{where}.ca_file: {path} is not a PEM certificate: "
                         f"{getattr(e, 'reason', None) or e}") from None


def failure_result(e: HttpFailure, what: str = "",
                   memory: JsonDoc | None = None) -> Retry | Failed:
    """A request that got no usable reply: worth retrying (DNS, refused, TLS, deadline,
    reset, a reply too large), except a redirect (never followed) and a URL that cannot
    work as written: those are undeliverable until the config changes."""
    text = clean(f"{what}{e.message}")
    if e.kind in ("redirect", "url"):
        return Failed(text, memory or {})
    return Retry(text, None, memory or {})


def by_status(status: int, body: str, headers: HTTPMessage | Mapping[str, str] | None,
              memory: JsonDoc | None = None,
              what: str = "", url: str = "") -> Result:
    """2xx Accepted; 3xx Failed (redirects are never followed: the message names the
    Location's host only); 429 / 5xx / 408 / 425 Retry (honouring Retry-After); other 4xx
    Failed. The reply's excerpt in the message has registered secrets removed."""
    mem = memory or {}
    if 200 <= status < 300:
        return Accepted(mem)
    if 300 <= status < 400:
        loc = headers.get("Location") if headers else None
        return Failed(f"{what}{redirect_message(status, loc, url)}", mem)
    text = f"{what}HTTP {status}: {clean(body).strip()[:200]}".strip()  # cut after cleaning
    if status in (408, 425, 429) or status >= 500:
        return Retry(text, retry_after(headers.get("Retry-After") if headers else None), mem)
    return Failed(text, mem)


def post_json(url: str, payload: Json, headers: dict[str, str], timeout: float,
              memory: JsonDoc | None = None,
              ssl_context: ssl.SSLContext | None = None) -> Result:
    """POST ``payload`` through the guarded request (``timeout``: its one deadline); the
    reply mapped by :func:`by_status` (a 3xx is Failed, never followed); no usable reply
    is Retry with a message naming the host only."""
    data = json.dumps(payload).encode()
    try:
        r = http.request("POST", url, data, {"Content-Type": "application/json", **headers},
                         deadline_s=timeout, ssl_context=ssl_context)
    except http.HttpFailure as e:
        return failure_result(e, "", memory)
    # a receiver quoting the URL back: by_status removes it (registered as a secret)
    result = by_status(r.status, r.body.decode(errors="replace"), r.headers, memory, url=url)
    if isinstance(result, Accepted):
        return Accepted(result.memory, f"HTTP {r.status} from {http.host_of(url)}")
    return result
