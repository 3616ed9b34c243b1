"""The metrics endpoint's HTTP server: one thread, a bounded number of sockets, a deadline.

prometheus_client's own server gives every connection a thread and no read timeout:
1,016 connections that never finished their headers, at systemd's default 1,024 file
descriptors, once starved the whole agent (a critical XID page 2 min 16 s late with "Too
many open files", a failed reload, failed scrapes). With ``listen: 0.0.0.0:9849`` any host
that reaches the port could do that. This server cannot:

* **One thread, one selector**: no thread per connection, so no memory per connection
  beyond its buffers (a request is at most :data:`MAX_REQUEST_BYTES`).
* **At most** :func:`max_connections` **sockets**: 64, or an eighth of the process's file
  descriptor limit if that is less. The rest of the descriptors are the agent's own (the
  state database, NVML, the sinks' connections, a reload's files): the endpoint never
  takes from them. When all are in use, a new connection pushes out the oldest one that
  has not sent a whole request (an idle or trickling one: a real scrape sends its request
  at once), so Prometheus keeps getting in however many idle connections are held open.
* **A deadline per connection**: :data:`DEADLINE_S` (10 s, Prometheus' default scrape
  timeout) from accept to the last byte of the reply; after it the socket is closed.
* ``accept`` failing for lack of descriptors (another part of the process used them up)
  pauses accepting for a second and is logged once a minute, never a traceback.

It serves ``GET /metrics`` (and ``/``) with ``Connection: close``, the text format
Prometheus asks for (``choose_encoder``: OpenMetrics when its ``Accept`` says so) and gzip
when accepted; anything else is a 404 or 405.
"""

from __future__ import annotations

import errno
import gzip
import logging
import resource
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("watchdog.metrics")

MAX_CONNECTIONS = 64
DEADLINE_S = 10.0
MAX_REQUEST_BYTES = 8192
BACKLOG = 128
ACCEPT_PAUSE_S = 1.0  # after EMFILE/ENFILE: accepting pauses this long
_LOG_EVERY_S = 60.0


def max_connections() -> int:
    """Sockets the endpoint may hold: :data:`MAX_CONNECTIONS`, or an eighth of the soft
    ``RLIMIT_NOFILE`` when that is less (at least 4)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, soft // 8))


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    accepted: float
    inbuf: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the reply being written; None while reading


class MetricsServer:
    """Serves ``registry`` on ``host:port`` from one thread (:meth:`start`) until
    :meth:`shutdown`. ``server_address`` is the bound ``(host, port)``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
        except BaseException:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()[:2]
        self.limit = max_connections()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[int, _Conn] = {}
        self._stop = threading.Event()
        self._paused_until = 0.0
        self._logged_at = -_LOG_EVERY_S
        self.evicted = 0  # connections pushed out for a new one (idle or trickling)
        self.expired = 0  # connections closed at their deadline
        self.served = 0
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and close every socket (from any thread)."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        for c in list(self._conns.values()):
            self._close(c)
        for s in (self._listener, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            if self._paused_until and now >= self._paused_until:
                self._paused_until = 0.0
                self._sel.register(self._listener, selectors.EVENT_READ, None)
            due = min((c.deadline for c in self._conns.values()), default=now + 60.0)
            if self._paused_until:
                due = min(due, self._paused_until)
            try:
                events = self._sel.select(max(0.0, due - now))
            except OSError as e:  # select itself failing: wait, go on
                self._say(f"metrics endpoint: select failed: {e}")
                time.sleep(0.1)
                continue
            for key, mask in events:
                try:
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.data == "wake":
                        self._wake_r.recv(64)
                    elif mask & selectors.EVENT_READ:
                        self._read(key.data)
                    else:
                        self._write(key.data)
                except Exception as e:  # noqa: BLE001 - one connection never ends the endpoint
                    self._say(f"metrics endpoint: {type(e).__name__}: {e}")
                    if isinstance(key.data, _Conn):
                        self._close(key.data)
            now = time.monotonic()
            for c in [c for c in self._conns.values() if c.deadline <= now]:
                self.expired += 1
                self._close(c)

    def _accept(self) -> None:
        for _ in range(BACKLOG):  # drain the backlog, a bounded number at a time
            try:
                sock, _addr = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._say(f"metrics endpoint: not accepting for {ACCEPT_PAUSE_S:g} s: "
                              f"{e.strerror} (the process is out of file descriptors)")
                    self._paused_until = time.monotonic() + ACCEPT_PAUSE_S
                    self._sel.unregister(self._listener)
                    return
                continue  # ECONNABORTED and the like: that one connection only
            if len(self._conns) >= self.limit and not self._evict():
                sock.close()  # every slot is writing a reply: this one waits for none
                continue
            sock.setblocking(False)
            now = time.monotonic()
            c = _Conn(sock, now + DEADLINE_S, now)
            self._conns[sock.fileno()] = c
            self._sel.register(sock, selectors.EVENT_READ, c)

    def _evict(self) -> bool:
        """Push out the oldest connection still reading its request, emptiest first."""
        reading = [c for c in self._conns.values() if c.out is None]
        if not reading:
            return False
        victim = min(reading, key=lambda c: (len(c.inbuf) > 0, c.accepted))
        self.evicted += 1
        self._close(victim)
        return True

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if not data:
            self._close(c)
            return
        c.inbuf += data
        end = c.inbuf.find(b"\r\n\r\n")
        if end < 0:
            if len(c.inbuf) > MAX_REQUEST_BYTES:
                self._reply(c, 431, b"request header fields too large\n", "text/plain")
            return
        self._respond(c, bytes(c.inbuf[:end]))

    def _respond(self, c: _Conn, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (x.partition(":") for x in lines[1:])}
        if len(parts) != 3:
            self._reply(c, 400, b"bad request\n", "text/plain")
            return
        method, target, _version = parts
        if target.split("?", 1)[0] not in ("/metrics", "/"):
            self._reply(c, 404, b"not found: try /metrics\n", "text/plain")
            return
        if method not in ("GET", "HEAD"):
            self._reply(c, 405, b"method not allowed\n", "text/plain")
            return
        from prometheus_client.exposition import choose_encoder

        encoder, ctype = choose_encoder(headers.get("accept", ""))
        body = encoder(self.registry)
        extra = ""
        if "gzip" in headers.get("accept-encoding", ""):
            body, extra = gzip.compress(body), "Content-Encoding: gzip\r\n"
        self.served += 1
        self._reply(c, 200, b"" if method == "HEAD" else body, ctype, extra, len(body))

    def _reply(self, c: _Conn, status: int, body: bytes, ctype: str, extra: str = "",
               length: int | None = None) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                  431: "Request Header Fields Too Large"}[status]
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: "
                f"{len(body) if length is None else length}\r\n{extra}Connection: close\r\n\r\n")
        c.out = memoryview(head.encode("latin-1") + body)
        c.inbuf.clear()
        self._sel.modify(c.sock, selectors.EVENT_WRITE, c)
        self._write(c)

    def _write(self, c: _Conn) -> None:
        assert c.out is not None
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        c.out = c.out[n:]
        if not len(c.out):
            self._close(c)

    def _close(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if fd >= 0 and self._conns.get(fd) is c:
            del self._conns[fd]
            try:
                self._sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        c.sock.close()

    def _say(self, text: str) -> None:
        """A problem line, at most once a minute (a flood must not flood the journal)."""
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.warning("%s", text)
