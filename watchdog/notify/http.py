"""One guarded HTTP request: what every sink's traffic goes through, so that a sink can
never hurt the agent.

A sink's endpoint is outside our control and may be broken, slow or hostile. urllib (and
the clients built on it) would follow a redirect to another host carrying the
``Authorization`` header, wait forever on a server that trickles one byte every few
seconds (its timeout is per socket read), and read a reply of any size into memory.
:func:`request` is the one place that prevents all of that, with the standard library
only (``http.client``):

* **One deadline per request** (``deadline_s``: name resolution, connect, TLS handshake,
  sending, the status line and headers, and the body, all together). Every socket
  operation gets at most the time left, and a ``threading.Timer`` shuts the socket down
  when the deadline passes, so a read blocked on a trickling server returns at once. Name
  resolution (which no socket timeout bounds) runs in a helper thread that is abandoned
  when the deadline passes.
* **Redirects are never followed**: a 3xx is returned as a status (the sinks turn it into
  an undeliverable ``Failed`` naming the Location's host), so credentials only ever go to
  the configured host.
* **Bounded replies**: at most ``max_body`` bytes (64 KiB) are read. A larger 2xx reply is
  an error (:class:`HttpFailure` ``too_large``: its content would have to be parsed); an
  error reply (4xx/5xx) is cut at the cap and still returned, its status is what matters.
  A reply announcing a larger ``Content-Length`` is refused before reading. No
  ``Accept-Encoding`` is offered, so nothing inflates behind the cap.
* **One failure type**, :class:`HttpFailure`, with a ``kind`` per failure mode and a
  one-line message that names the host (and port) only, never the URL's path or query
  (a webhook URL is often the secret): ``dns`` "cannot resolve HOST", ``refused``
  "HOST:PORT refused the connection", ``connect`` (unreachable network, ...),
  ``tls_verify`` "TLS: HOST's certificate is not trusted: REASON; check ca_file", ``tls``
  (any other TLS failure), ``deadline``, ``reset`` (closed mid-reply), ``protocol`` (not
  HTTP), ``too_large``, ``proxy`` and ``url``. It is not an ``OSError``, so no client's
  own connection-retry loop retries it: retrying is the outbox's job.
* **Proxies** as urllib honoured them: ``http_proxy``/``https_proxy``/``no_proxy`` from the
  environment (``proxy=ENV``), or an explicit ``http://[user:pass@]host:port``; https
  goes through a ``CONNECT`` tunnel. The proxy sees the target host only (and the
  request itself, for plain http).
"""

from __future__ import annotations

import base64
import functools
import http.client
import ipaddress
import math
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_BODY = 64 * 1024
ENV = "env"  # ``proxy=ENV``: the proxy environment variables decide, as urllib does
_CHUNK = 8192


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply: status, headers (case-insensitive ``.get``), the body (at most the cap).
    ``truncated``: an error reply whose body was cut at the cap."""

    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytes
    truncated: bool = False


class HttpFailure(Exception):
    """The request got no usable reply. ``kind``: dns, refused, connect, tls_verify, tls,
    deadline, reset, protocol, too_large, proxy, url; and redirect, raised by the client
    transports (Slack's, PagerDuty's) instead of handing a 3xx to a library that might
    follow it. ``message``: one line, host only."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def host_of(url: str) -> str:
    """The host of ``url`` (no userinfo, port, path or query): what messages may name."""
    try:
        return urllib.parse.urlsplit(url).hostname or "?"
    except ValueError:
        return "?"


def redirect_message(status: int, location: str | None, url: str) -> str:
    """``HTTP 302 redirect to HOST: not followed (...)``, naming the Location's host only."""
    if not location:
        return f"HTTP {status} redirect (no Location): not followed (put the final URL in " \
               "the config)"
    target = host_of(urllib.parse.urljoin(url, location))
    return f"HTTP {status} redirect to {target}: not followed (put the final URL in the config)"


class _Guard:
    """The deadline of one request: time left, the sockets to cut, the phase we are in."""

    def __init__(self, deadline_s: float, where: str) -> None:
        self.deadline_s = deadline_s
        self.end = time.monotonic() + deadline_s
        self.where = where
        self.phase = "connecting"
        self.expired = False
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.deadline()
        return left

    def deadline(self) -> HttpFailure:
        return HttpFailure("deadline", f"{self.where}: deadline of {self.deadline_s:g} s passed "
                           f"while {self.phase} (request abandoned)")

    def cut(self) -> None:
        """The timer: shut every socket down so a blocked call returns now."""
        with self.lock:
            self.expired = True
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


#: getaddrinfo's answers: (family, type, proto, canonical name, socket address)
AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str,
                 tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]]


def _resolve(host: str, port: int, guard: _Guard) -> Sequence[AddrInfo]:
    """getaddrinfo within the deadline (an IP address is resolved inline)."""
    try:
        ipaddress.ip_address(host)
        return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except ValueError:
        pass
    found: list[Sequence[AddrInfo]] = []
    failed: list[OSError] = []

    def work() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except OSError as e:
            failed.append(e)

    t = threading.Thread(target=work, name="watchdog-resolve", daemon=True)
    t.start()
    t.join(guard.left())
    if t.is_alive():  # left behind: it ends when the resolver gives up
        guard.phase = f"resolving {host}"
        raise guard.deadline()
    if failed:
        raise failed[0]
    return found[0]


def _dialer(guard: _Guard) -> Callable[[tuple[str, int], object, object], socket.socket]:
    """http.client's ``_create_connection`` hook: resolve and connect within the deadline,
    registering the socket with the guard so the timer can cut it."""

    def dial(address: tuple[str, int], timeout: object = None,
             source: object = None) -> socket.socket:
        host, port = address
        err: OSError | None = None
        for family, type_, proto, _, sa in _resolve(host, port, guard):
            sock = socket.socket(family, type_, proto)
            with guard.lock:
                if guard.expired:
                    sock.close()
                    raise guard.deadline()
                guard.socks.append(sock)
            try:
                sock.settimeout(guard.left())
                sock.connect(sa)
                return sock
            except OSError as e:  # the next address, if any
                err = e
                sock.close()
            except BaseException:
                sock.close()
                raise
        raise err or OSError(f"no address for {host}")

    return dial


@functools.cache
def _system_tls() -> ssl.SSLContext:
    """The system's CAs, loaded once (an SSLContext is safe to share between threads)."""
    return ssl.create_default_context()


def _proxy_for(url: urllib.parse.SplitResult, proxy: str | None) -> str | None:
    if proxy != ENV:
        return proxy or None
    host = url.hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(url.scheme) or None


def request(method: str, url: str, body: bytes | None, headers: dict[str, str] | list[
        tuple[str, str]] | None = None, *, deadline_s: float,
        ssl_context: ssl.SSLContext | None = None, max_body: int = MAX_BODY,
        proxy: str | None = ENV) -> Reply:
    """Send one request; the reply (any status, 3xx included: never followed) or
    :class:`HttpFailure`. ``deadline_s`` bounds the whole exchange."""
    try:
        u = urllib.parse.urlsplit(url)
        scheme, host, port = u.scheme.lower(), u.hostname, u.port
    except ValueError:
        raise HttpFailure("url", "bad URL (its port is not a number)") from None
    if scheme not in ("http", "https") or not host:
        raise HttpFailure("url", f"bad URL: needs http:// or https:// and a host, not "
                                 f"{scheme or 'no scheme'}://{host or ''}")
    port = port or (443 if scheme == "https" else 80)
    if not (isinstance(deadline_s, int | float) and math.isfinite(deadline_s)
            and deadline_s > 0):
        raise ValueError(f"deadline_s must be a positive number, not {deadline_s!r}")
    named = f"[{host}]" if ":" in host else host  # an IPv6 address
    where = named if port in (80, 443) else f"{named}:{port}"
    guard = _Guard(float(deadline_s), where)
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    if not any(k.lower() == "accept-encoding" for k, _ in hdrs):
        hdrs.append(("Accept-Encoding", "identity"))
    conn, dial_where = _connection(u, scheme, host, port, proxy, ssl_context, guard, hdrs)
    if dial_where != where and scheme == "http":
        target = urllib.parse.urlunsplit((scheme, u.netloc.rsplit("@", 1)[-1], u.path or "/",
                                          u.query, ""))
    conn._create_connection = _dialer(guard)  # type: ignore[attr-defined]
    timer = threading.Timer(guard.deadline_s, guard.cut)
    timer.daemon = True
    timer.start()
    try:
        return _exchange(conn, method, target, body, hdrs, guard, max_body)
    except HttpFailure:
        raise
    except Exception as e:  # noqa: BLE001 - every failure becomes one HttpFailure
        raise _failure(e, guard, dial_where, host, port) from None
    finally:
        timer.cancel()
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a socket that was cut
            pass


def _connection(u: urllib.parse.SplitResult, scheme: str, host: str, port: int,
                proxy: str | None, ctx: ssl.SSLContext | None, guard: _Guard,
                hdrs: list[tuple[str, str]]) -> tuple[http.client.HTTPConnection, str]:
    """The connection object (not yet connected) and what a connect failure names."""
    purl = _proxy_for(u, proxy)
    if purl is None:
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, context=ctx or _system_tls()), \
                guard.where
        return http.client.HTTPConnection(host, port), guard.where
    try:
        p = urllib.parse.urlsplit(purl if "://" in purl else f"http://{purl}")
        phost, pport = p.hostname, p.port or 8080
    except ValueError:
        raise HttpFailure("proxy", "bad proxy URL (its port is not a number)") from None
    if p.scheme != "http" or not phost:
        raise HttpFailure("proxy", f"proxy {phost or '?'}: only http:// proxies are supported")
    auth = []
    if p.username is not None:
        cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
        auth = [("Proxy-Authorization", "Basic " + base64.b64encode(cred.encode()).decode())]
    pwhere = f"proxy {phost}:{pport}"
    if scheme == "https":
        c: http.client.HTTPConnection = http.client.HTTPSConnection(
            phost, pport, context=ctx or _system_tls())
        c.set_tunnel(host, port, headers=dict(auth))
    else:
        c = http.client.HTTPConnection(phost, pport)
        hdrs.extend(auth)
    return c, pwhere


def _exchange(conn: http.client.HTTPConnection, method: str, target: str, body: bytes | None,
              hdrs: list[tuple[str, str]], guard: _Guard, max_body: int) -> Reply:
    conn.timeout = guard.left()
    conn.connect()
    with guard.lock:  # after a TLS wrap the socket object is a new one
        if conn.sock is not None:
            guard.socks.append(conn.sock)
        if guard.expired:
            raise guard.deadline()
    guard.phase = "sending the request"
    conn.sock.settimeout(guard.left())
    conn.request(method, target, body=body, headers=dict(hdrs))
    guard.phase = "waiting for the reply"
    conn.sock.settimeout(guard.left())
    resp = conn.getresponse()
    status = resp.status
    if 300 <= status < 400:  # never followed, never read
        return Reply(status, resp.reason, resp.headers, b"")
    guard.phase = "reading the reply"
    ok = 200 <= status < 300
    if ok and resp.length is not None and resp.length > max_body:
        raise _too_large(guard, max_body)
    chunks: list[bytes] = []
    got = 0
    while got <= max_body:
        if conn.sock is not None:
            conn.sock.settimeout(guard.left())
        chunk = resp.read(min(_CHUNK, max_body + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if guard.expired:  # the timer cut the body short (a cut read looks like its end)
        raise guard.deadline()
    data = b"".join(chunks)
    if got > max_body:
        if ok:
            raise _too_large(guard, max_body)
        return Reply(status, resp.reason, resp.headers, data[:max_body], truncated=True)
    return Reply(status, resp.reason, resp.headers, data)


def _too_large(guard: _Guard, max_body: int) -> HttpFailure:
    return HttpFailure("too_large", f"{guard.where}: reply larger than {max_body // 1024} KiB "
                                    "(not read further)")


def _failure(e: BaseException, guard: _Guard, dial_where: str, host: str,
             port: int) -> HttpFailure:
    """One exception of http.client / ssl / socket as an HttpFailure (host only)."""
    where = guard.where
    if guard.expired or isinstance(e, TimeoutError):
        return guard.deadline()
    if isinstance(e, socket.gaierror):
        name = dial_where.removeprefix("proxy ").rsplit(":", 1)[0] if dial_where != where \
            else host
        what = " (the proxy)" if dial_where != where else ""
        return HttpFailure("dns", f"cannot resolve {name}{what}: {e.strerror or e}")
    if isinstance(e, ssl.SSLCertVerificationError):
        reason = e.verify_message or e.reason or str(e)
        return HttpFailure("tls_verify", f"TLS: {host}'s certificate is not trusted: {reason}; "
                                         "check ca_file")
    if isinstance(e, ssl.SSLError):
        return HttpFailure("tls", f"TLS with {where} failed: {e.reason or e} (is it an "
                                  "https server? check the URL's scheme and port)")
    if isinstance(e, ConnectionRefusedError):
        named = f"[{host}]" if ":" in host else host
        target = dial_where if dial_where != where else f"{named}:{port}"
        return HttpFailure("refused", f"{target} refused the connection")
    if isinstance(e, ConnectionResetError | BrokenPipeError | ConnectionAbortedError |
                  http.client.IncompleteRead | http.client.RemoteDisconnected):
        return HttpFailure("reset", f"{where} closed the connection while {guard.phase}")
    if isinstance(e, http.client.HTTPException):
        return HttpFailure("protocol", f"{where} sent something that is not an HTTP reply "
                                       f"({type(e).__name__})")
    if isinstance(e, OSError):
        if dial_where != where and type(e) is OSError and e.errno is None:
            return HttpFailure("proxy", f"{dial_where}: {e}")  # "Tunnel connection failed: 407"
        return HttpFailure("connect", f"cannot connect to {dial_where}: {e.strerror or e}")
    return HttpFailure("protocol", f"{where}: {type(e).__name__} while {guard.phase}")
