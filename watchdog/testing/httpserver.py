"""A loopback HTTP server for tests and benchmarks: it records every request and answers
with scripted replies, standing in for a webhook receiver, Slack's Web API or PagerDuty's
Events API where the real service cannot be reached.

``python -m watchdog.testing.httpserver PORT OUT.jsonl`` runs one that answers 202 to
everything and appends each request to OUT.jsonl (used on the GPU machine and in the
kill -9 test, where the receiver must outlive the agent).
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
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a slow or hung service)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
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
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n).decode(errors="replace")
                ctype = self.headers.get("Content-Type", "")
                if "json" in ctype:
                    try:
                        body: Any = json.loads(raw)
                    except ValueError:
                        body = raw
                elif "x-www-form-urlencoded" in ctype:
                    from urllib.parse import parse_qsl

                    body = dict(parse_qsl(raw))
                else:
                    body = raw
                req = Request("POST", self.path, dict(self.headers), body, time.time())
                reply = outer._answer(req)
                if reply.delay:
                    time.sleep(reply.delay)
                data = (reply.body if isinstance(reply.body, str)
                        else json.dumps(reply.body)).encode()
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

            def log_message(self, *args: Any) -> None:
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

    def __exit__(self, *exc: Any) -> None:
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
