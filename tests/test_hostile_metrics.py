"""Hostile network: idle connections to the metrics port cannot starve the agent.

The metrics server gave each connection a thread and no read timeout: 1,016 connections
that never finished their headers, at systemd's default of 1,024 file descriptors, made a
critical XID page go out 2 min 16 s late ("Too many open files"), failed the reload and
the scrapes. Now one thread serves at most 64 sockets (an eighth of the descriptor limit
when that is less), each with a deadline, pushing out the oldest idle one for a new one,
so the agent's own descriptors are never the endpoint's and a scrape always gets in.
``bench/metrics_flood.py`` measures the page delay under 1,100 idle connections.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_fleet_metrics import stub

from watchdog.service import metrics_http
from watchdog.service.metrics import serve
from watchdog.testing.flood import Flood, raise_nofile
from watchdog.testing.httpserver import Server


@pytest.fixture()
def endpoint() -> Any:
    p, jobs = stub()
    server, err = serve(p, "127.0.0.1", 0, quiet=True, jobs=jobs)
    assert err is None, err
    yield server
    server.shutdown()


def _get(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read()


def _held(socks: list[socket.socket]) -> int:
    """How many of these client sockets the server still holds open."""
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1) != b""
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def test_idle_connections_take_no_thread_and_at_most_the_endpoints_sockets(endpoint: Any
                                                                           ) -> None:
    """network: 300 idle connections to the metrics port: no thread each, at most 64 held
    by the endpoint, and a scrape still answered"""
    assert raise_nofile(1024)
    port = endpoint.server_address[1]
    threads = threading.active_count()
    socks = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)
        time.sleep(1.0)  # let the endpoint take them all in
        assert threading.active_count() - threads <= 1
        assert b"watchdog_ticks_total" in _get(port)
        assert _held(socks) <= metrics_http.max_connections()
    finally:
        for s in socks:
            s.close()


def test_an_idle_connection_is_closed_at_its_deadline(endpoint: Any, monkeypatch: Any) -> None:
    """network: a connection that never sends its request is closed at the deadline"""
    monkeypatch.setattr(metrics_http, "DEADLINE_S", 0.5)
    s = socket.create_connection(("127.0.0.1", endpoint.server_address[1]), timeout=15)
    s.sendall(b"GET /metr")  # a request that never ends
    try:
        assert s.recv(1024) == b""  # closed, with nothing said
    finally:
        s.close()


def test_an_endless_request_header_is_refused(endpoint: Any) -> None:
    """network: 9 kB of request headers without an end: 431, connection closed"""
    s = socket.create_connection(("127.0.0.1", endpoint.server_address[1]), timeout=15)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Fill: " + b"a" * 9000)
        reply = s.recv(1024)
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 431"), reply


def test_fewer_descriptors_mean_fewer_endpoint_sockets() -> None:
    """network: the endpoint takes at most an eighth of the descriptor limit"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert metrics_http.max_connections() == 32
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
        assert metrics_http.max_connections() == 64
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


@pytest.mark.slow
def test_a_flood_of_idle_connections_does_not_starve_the_agent(tmp_path: Path) -> None:
    """network: 1,100 idle connections to the metrics port of an agent at LimitNOFILE=1024:
    the XID page goes out, every scrape is answered, the agent's descriptors stay within
    its own and the endpoint's 64, no "Too many open files", no traceback"""
    if not raise_nofile(1500):
        pytest.skip("cannot open 1,100 connections here (ulimit -n)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    sc = tmp_path / "sc.yaml"
    sc.write_text(json.dumps({"name": "xid", "xids": [[20.0, 0, 79]], "gpus": [
        {"uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000"} for i in range(8)]}))
    with Server() as hook:
        cfg = tmp_path / "w.yaml"
        cfg.write_text(f"state_dir: {tmp_path / 'state'}\nmetrics: {{listen: 127.0.0.1:{port}}}"
                       f"\nmodel: off\nnotify:\n  group_wait: 0s\n  sinks:\n"
                       f"    hook: {{type: webhook, url: \"{hook.url}/page\"}}\n")

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

        log = tmp_path / "agent.log"
        with open(log, "w") as out:
            agent = subprocess.Popen(
                [sys.executable, "-m", "watchdog.testing.fakenvml", str(sc), "--", "watchdog",
                 "run", "--config", str(cfg), "--duration", "30s"], stdout=out, stderr=out,
                env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
                preexec_fn=limit)
            try:
                end = time.monotonic() + 60
                while "watching 8 GPUs" not in log.read_text() and time.monotonic() < end:
                    time.sleep(0.1)
                base = _fds(agent.pid)
                ok = failed = peak = 0
                started = time.monotonic()
                with Flood("127.0.0.1", port, 1100) as flood:
                    assert flood.wait_open()
                    # scrapes until well before the agent's --duration ends (a scrape while
                    # it stops is refused, rightly)
                    while agent.poll() is None and time.monotonic() - started < 20:
                        try:
                            ok += b"watchdog_ticks_total" in _get(port)
                        except OSError:
                            failed += 1
                        peak = max(peak, _fds(agent.pid))
                        time.sleep(0.5)
                assert agent.wait(60) == 0, log.read_text()[-3000:]
            finally:
                if agent.poll() is None:
                    agent.kill()
                    agent.wait()
        text = log.read_text()
        pages = [r.body["reason"] for r in hook.requests]
    assert "new" in pages, text[-3000:]
    assert failed == 0 and ok >= 10, (ok, failed)
    assert flood.closed_by_server > 0  # the endpoint pushed idle ones out
    assert peak <= base + metrics_http.MAX_CONNECTIONS + 8, (base, peak)
    assert "Too many open files" not in text and "Traceback" not in text, text[-3000:]
