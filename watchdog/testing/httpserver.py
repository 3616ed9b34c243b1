"""A loopback HTTP server for tests and benchmarks: it records every request and answers
with scripted replies, standing in for a webhook receiver, Slack's Web API or PagerDuty's
Events API where the real service cannot be reached.

``python -m watchdog.testing.httpserver PORT OUT.jsonl`` runs one that answers 202 to
everything and appends each request to OUT.jsonl (a receiver for a real agent, as in the
kill -9 test, where the receiver must outlive the agent).

A reply can also misbehave the way a broken or hostile endpoint does
(``tests/test_hostile_sinks.py``): :func:`redirect` (a 3xx elsewhere), :func:`trickle`
(the whole reply one byte at a time), :func:`huge` (an endless or enormous body),
:func:`retry_after` (any ``Retry-After``) and ``Reply(cut=N)`` (the connection reset after
the headers and N bytes of the body). ``Server.connections`` counts the connections
accepted, so a test can prove that nothing at all reached a server.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.untyped import Json


@dataclass
class Reply:
    status: int = 200
    body: Json = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a slow or hung service)
    trickle: float = 0.0  # > 0: send the whole reply one byte every this many seconds
    stream: int | None = None  # send this many filler bytes as the body; -1: endless
    length: bool = True  # announce Content-Length (with stream: False = close-delimited)
    cut: int | None = None  # send the headers and N bytes of the body, then reset


#: an "endless" body stops here all the same, so a client that reads everything fails a
#: test instead of exhausting the machine
ENDLESS_CAP = 256 << 20


def redirect(location: str, status: int = 302) -> Reply:
    """A redirect (to another host, typically): a client must not follow it."""
    return Reply(status, {"moved": True}, {"Location": location})


def trickle(every: float = 2.0, status: int = 200, body: Json = None) -> Reply:
    """The whole reply (status line, headers, body) one byte every ``every`` seconds."""
    return Reply(status, {"ok": True} if body is None else body, trickle=every)


def huge(size: int = -1, status: int = 200, length: bool = False) -> Reply:
    """A body of ``size`` filler bytes (-1: endless), by default without Content-Length."""
    return Reply(status, "", stream=size, length=length)


def retry_after(value: str, status: int = 429) -> Reply:
    """A rate-limit reply with any ``Retry-After`` (seconds, an HTTP date, nonsense)."""
    return Reply(status, {"ok": False, "error": "ratelimited"}, {"Retry-After": value})


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Json
    at: float


class Server:
    """Records requests; ``script`` (a list of Reply, consumed in order) then ``default``,
    or ``handler(request) -> Reply`` when given, decides each answer."""

    def __init__(self, default: Reply | None = None,
                 handler: Callable[[Request], Reply] | None = None,
                 log_path: str | None = None, tls: tuple[str, str] | None = None) -> None:
        self.requests: list[Request] = []
        self.script: list[Reply] = []
        self.default = default or Reply()
        self.handler = handler
        self.log_path = log_path
        self._lock = threading.Lock()
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                with outer._lock:
                    outer.connections += 1
                super().setup()

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n).decode(errors="replace")
                ctype = self.headers.get("Content-Type", "")
                if "json" in ctype:
                    try:
                        body: Json = json.loads(raw)
                    except ValueError:
                        body = raw
                elif "x-www-form-urlencoded" in ctype:
                    from urllib.parse import parse_qsl

                    body = dict(parse_qsl(raw))
                else:
                    body = raw
                req = Request(self.command, self.path, dict(self.headers), body, time.time())
                reply = outer._answer(req)
                if reply.delay:
                    time.sleep(reply.delay)
                data = (reply.body if isinstance(reply.body, str)
                        else json.dumps(reply.body)).encode()
                if reply.trickle or reply.stream is not None or reply.cut is not None:
                    self._misbehave(reply, data)
                    return
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_PUT = do_POST
            do_GET = do_POST  # what urllib turns a POST into when it follows a 302

            def _misbehave(self, reply: Reply, data: bytes) -> None:
                """Write the reply by hand: trickled, streamed, or cut short."""
                head = [f"HTTP/1.0 {reply.status} {self.responses.get(reply.status, ('',))[0]}",
                        "Content-Type: application/json", "Connection: close"]
                size = len(data) if reply.stream is None else reply.stream
                if reply.length and size >= 0:
                    head.append(f"Content-Length: {size}")
                head += [f"{k}: {v}" for k, v in reply.headers.items()]
                raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
                if reply.stream is None:
                    raw += data[: reply.cut] if reply.cut is not None else data
                self.close_connection = True
                try:
                    if reply.trickle:
                        for i in range(len(raw)):
                            self.wfile.write(raw[i:i + 1])
                            self.wfile.flush()
                            time.sleep(reply.trickle)
                    else:
                        self.wfile.write(raw)
                    if reply.stream is not None and reply.cut is None:
                        left = ENDLESS_CAP if reply.stream < 0 else reply.stream
                        block = b"x" * 65536
                        while left > 0:
                            self.wfile.write(block[:left])
                            left -= len(block)
                    self.wfile.flush()
                    if reply.cut is not None:  # drop it: RST instead of an orderly close
                        import socket
                        import struct

                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                   struct.pack("ii", 1, 0))
                        socket.close(self.connection.detach())
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls is not None:  # (certificate, key) files: serve HTTPS
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _answer(self, req: Request) -> Reply:
        with self._lock:
            reply = self.handler(req) if self.handler else (
                self.script.pop(0) if self.script else self.default)
            if reply.status < 300:
                self.requests.append(req)
                if self.log_path:
                    with open(self.log_path, "a") as fh:
                        fh.write(json.dumps({"path": req.path, "body": req.body,
                                             "at": req.at}) + "\n")
            else:
                self.refused.append(req)
        return reply

    refused: list[Request]

    def __enter__(self) -> Server:
        self.refused = []
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def start(self) -> Server:
        return self.__enter__()

    def stop(self) -> None:
        self.__exit__()


def self_signed_cert(folder: str | Path) -> tuple[str, str]:
    """(certificate, key) files for 127.0.0.1, made with openssl: PagerDuty's client speaks
    HTTPS only, so its loopback stand-in needs one (``Server(tls=...)`` and the sink's
    ``ca_file``)."""
    import subprocess

    cert, key = str(Path(folder) / "cert.pem"), str(Path(folder) / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def main(argv: list[str]) -> int:
    """``PORT OUT.jsonl``: answer 202 to every POST, log each one (until killed)."""
    port, out = int(argv[0]), argv[1]
    srv = Server(Reply(202, {"status": "success", "dedup_key": "x"}), log_path=out)
    srv.httpd.server_close()
    srv.httpd = ThreadingHTTPServer(("127.0.0.1", port), srv.httpd.RequestHandlerClass)
    srv.refused = []
    print(f"listening on 127.0.0.1:{port}", flush=True)
    srv.httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
