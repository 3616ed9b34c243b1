"""Is the job clear on its other nodes? Asked of Prometheus before a job-wide page resolves.

A job-wide incident (a hung collective, a stalled job) has one identity on every node of
the job, so PagerDuty holds one incident for all of them (:mod:`watchdog.notify.fingerprint`)
and the first ``resolve`` closes it. A node whose hang cleared therefore asks the fleet
before it resolves: with ``job: {prometheus: URL}`` in its config, the notification
policy holds such a resolve while Prometheus shows another node of the job still in it
(``watchdog_gpu_hang``/``watchdog_gpu_stall`` of the job on another ``node``), so the
shared incident resolves when the job's last hung node has. Without the setting, or while
Prometheus cannot answer, a node resolves after ``resolve_hold`` as before (a node never
keeps a page open forever on a view it cannot get), and a hold ends after
:data:`watchdog.notify.stages.hold.FLEET_HOLD_MAX_S` in any case.

Prometheus is asked on a thread of its own every :data:`POLL_S` (never on the tick
thread), only about the jobs the policy asked about, one small query per job and kind,
through the guarded request of :mod:`watchdog.notify.http` (one deadline, capped reply,
no redirects).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable

from watchdog.incident import KIND

log = logging.getLogger("watchdog.fleet")
POLL_S = 15.0  # Prometheus asked this often (wall s)
STALE_S = 60.0  # an answer older than this is no answer
FORGET_S = 3600.0  # a job not asked about for this long is no longer polled


def _gauge(kind: str) -> str | None:
    """The per-GPU gauge the agents export for ``kind`` (job-wide kinds have one)."""
    k = KIND.get(kind)
    return None if k is None else k.gauge


def query_for(kind: str, job_id: str, node: str) -> str:
    """How many other nodes of ``job_id`` are in ``kind`` now (a kind with a gauge)."""
    metric = _gauge(kind)
    return (f'count(max by (node) ({metric}{{job_id="{_quote(job_id)}",'
            f'node!="{_quote(node)}"}} == 1))')


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class FleetView:
    """The answer to "is job J clear of ``kind`` on its other nodes?" (:meth:`job_clear`),
    kept fresh by a thread that asks Prometheus at ``url``."""

    def __init__(self, url: str, node: str, *, timeout: float = 5.0,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.url = url.rstrip("/")
        self.node = node
        self.timeout = timeout
        self.wall = wall
        self._lock = threading.Lock()
        self._wanted: dict[tuple[str, str], float] = {}  # (kind, job) -> last asked (wall)
        self._answers: dict[tuple[str, str], tuple[int, float]] = {}  # -> (others, at)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fleet-view", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def job_clear(self, kind: str, job_id: str) -> bool | None:
        """True: no other node of the job is in ``kind``; False: some are; None: not known
        (Prometheus not asked yet, not answering, or the kind is not job-wide)."""
        if _gauge(kind) is None:
            return None
        key = (kind, job_id)
        now = self.wall()
        with self._lock:
            fresh = key not in self._wanted
            self._wanted[key] = now
            got = self._answers.get(key)
        if fresh:
            self._wake.set()
        if got is None or now - got[1] > STALE_S:
            return None
        return got[0] == 0

    def poll(self) -> None:
        """Ask Prometheus about every job asked about in the last hour (one pass)."""
        from watchdog.notify import http

        now = self.wall()
        with self._lock:
            for key in [k for k, t in self._wanted.items() if now - t > FORGET_S]:
                self._wanted.pop(key, None)
                self._answers.pop(key, None)
            keys = list(self._wanted)
        for kind, job in keys:
            url = (f"{self.url}/api/v1/query?"
                   + urllib.parse.urlencode({"query": query_for(kind, job, self.node)}))
            try:
                r = http.request("GET", url, None, deadline_s=self.timeout)
                if r.status != 200:
                    raise ValueError(f"HTTP {r.status}")
                result = json.loads(r.body)["data"]["result"]
                others = int(float(result[0]["value"][1])) if result else 0
            except (http.HttpFailure, ValueError, KeyError, IndexError, TypeError) as e:
                text = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
                if text != self.error:
                    log.warning("fleet view: Prometheus at %s did not answer (%s): job-wide "
                                "resolves are sent after resolve_hold meanwhile",
                                http.host_of(self.url), text)
                self.error = text
                return
            with self._lock:
                self._answers[(kind, job)] = (others, self.wall())
        if self.error is not None and keys:
            log.info("fleet view: Prometheus answers again")
            self.error = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.poll()
            except Exception as e:  # noqa: BLE001 - the view must not die
                log.error("fleet view failed: %s: %s", type(e).__name__, e)
            self._wake.wait(POLL_S)
