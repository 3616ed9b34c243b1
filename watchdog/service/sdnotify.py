"""systemd's notify protocol (``Type=notify``), without a dependency.

systemd passes ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace) and,
with ``WatchdogSec=``, ``$WATCHDOG_USEC``. The agent sends ``READY=1`` after its first
tick, ``STATUS=…`` lines, ``WATCHDOG=1`` pings while ticks complete, and ``STOPPING=1``.
Outside systemd every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("watchdog.service")


class SystemdNotifier:
    """Sends notify messages on a datagram socket (one per message; failures logged once)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        e = os.environ if env is None else env
        addr = e.get("NOTIFY_SOCKET") or None
        if addr and addr.startswith("@"):
            addr = "\0" + addr[1:]
        self.address = addr
        usec = e.get("WATCHDOG_USEC")
        pid = e.get("WATCHDOG_PID")
        ok = usec and usec.isdigit() and (not pid or pid == str(os.getpid()))
        #: seconds between watchdog pings (half of WatchdogSec), or None without one
        self.watchdog_s: float | None = int(usec) / 2e6 if ok and usec else None
        self._sock: socket.socket | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send ``KEY=VALUE`` fields as one message; False when not under systemd."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError as e:
            if not self._warned:
                log.warning("cannot notify systemd at %s: %s", os.environ.get("NOTIFY_SOCKET"), e)
                self._warned = True
            return False

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def ping(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
