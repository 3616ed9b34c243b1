"""Idle connections held open against a port, as an attacker starving a server would.

:class:`Flood` opens ``n`` TCP connections to ``host:port`` that never send a byte (a
request whose headers never finish), and, while it runs, opens a new one for every one
the server closes (at most ``rate`` new ones a second once the first ``n`` are open), so
the server sees ``n`` idle connections the whole time. It runs on one thread with one
selector. The process needs ``n`` + a few file descriptors:
:func:`raise_nofile` lifts its own soft limit (root may lift the hard one too). Used by
``tests/test_hostile_metrics.py`` and ``bench/metrics_flood.py``.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import threading
import time


def raise_nofile(need: int) -> bool:
    """Lift this process's ``RLIMIT_NOFILE`` to at least ``need``; whether it is now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= need:
        return True
    try:
        new_hard = hard if hard == resource.RLIM_INFINITY or hard >= need else need
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, new_hard))
    except (ValueError, OSError):
        return False
    return True


class Flood:
    """``n`` idle connections to ``(host, port)``, kept at ``n`` until :meth:`stop`."""

    def __init__(self, host: str, port: int, n: int, rate: float = 500.0) -> None:
        self.addr = (host, port)
        self.n = n
        self.rate = rate
        self.opened = 0  # connections made (the first n and every one that replaced one)
        self.closed_by_server = 0
        self.failed = 0  # connects refused or failed
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def open_now(self) -> int:
        return len(self._sel.get_map() or {})

    def wait_open(self, timeout: float = 30.0) -> bool:
        """Wait until ``n`` connections were opened at least once."""
        end = time.monotonic() + timeout
        while self.opened < self.n and time.monotonic() < end:
            time.sleep(0.05)
        return self.opened >= self.n

    def _connect(self) -> None:
        s = socket.socket(socket.AF_INET6 if ":" in self.addr[0] else socket.AF_INET)
        s.setblocking(False)
        rc = s.connect_ex(self.addr)
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.failed += 1
            return
        self.opened += 1
        self._sel.register(s, selectors.EVENT_READ)

    def _run(self) -> None:
        budget, last = float(self.n), time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            budget = min(float(self.n), budget + (now - last) * self.rate)
            last = now
            while len(self._sel.get_map()) < self.n and budget >= 1 and \
                    not self._stop.is_set():
                budget -= 1
                try:
                    self._connect()
                except OSError:
                    self.failed += 1
                    break
            for key, _ in self._sel.select(0.05):
                s = key.fileobj
                try:
                    data = s.recv(1024)  # type: ignore[union-attr]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.closed_by_server += 1
                    self._sel.unregister(s)
                    s.close()  # type: ignore[union-attr]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()
