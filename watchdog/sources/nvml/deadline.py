"""A deadline for every NVML call: calls run on worker threads ("lanes"), callers wait.

NVML calls are blocking C calls that cannot be interrupted; a wedged driver can hold one
for minutes. So each GPU gets its own long-lived daemon worker (a lane) and the sampling
thread only *waits* for it, at most ``timeout`` seconds per NVML call. A lane records which
call it is inside and since when (``time.monotonic``: deadlines are real elapsed time, not
the injected sampling clock), so the waiter can name the call that wedged. A wedged lane
stays busy; callers skip it (``busy``) until the stuck call returns, and one wedged GPU
never delays the others.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast


class Wedged(Exception):
    """An NVML call did not return within its deadline; ``call`` names it."""

    def __init__(self, call: str, seconds: float) -> None:
        super().__init__(f"{call} did not return within {seconds:g} s")
        self.call = call
        self.seconds = seconds


T = TypeVar("T")


class Job:
    """One unit of work submitted to a lane and its outcome."""

    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None


class Lane:
    """A daemon worker thread running jobs in order; ``enter(call)`` marks each NVML call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._q: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self.inflight: tuple[str, float] = ("(queued)", time.monotonic())
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while a submitted job has not finished (e.g. a wedged call)."""
        return self._pending > 0

    def enter(self, call: str) -> None:
        """Called on the lane thread just before an NVML call starts."""
        self.inflight = (call, time.monotonic())

    def submit(self, fn: Callable[[], object]) -> Job:
        job = Job(fn)
        with self._lock:
            self._pending += 1
            self.inflight = ("(queued)", time.monotonic())
        self._q.put(job)
        return job

    def run(self, fn: Callable[[], T], timeout: float) -> T:
        """Submit ``fn`` and wait for it under the per-call deadline."""
        return cast(T, self.wait(self.submit(fn), timeout))  # what fn returned

    def wait(self, job: Job, timeout: float) -> object:
        """The job's result; re-raises its exception; ``Wedged`` if one call overran."""
        while True:
            call, started = self.inflight
            remaining = started + timeout - time.monotonic()
            if job.done.wait(max(remaining, 0.0)):
                if job.error is not None:
                    raise job.error
                return job.result
            if self.inflight == (call, started):
                raise Wedged(call, timeout)

    def stop(self) -> None:
        """Ask the worker to exit after its current job (it is a daemon either way)."""
        self._q.put(None)

    def _loop(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                job.error = e
            finally:
                with self._lock:
                    self._pending -= 1
                job.done.set()
