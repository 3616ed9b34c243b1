"""Run the real ``watchdog`` command with a hang guard and an address-space ceiling, for the
hostile-conditions tests (``tests/test_hostile_*.py``) and ``bench/hostile.py``.

Each case starts ``python -m watchdog …`` as a subprocess, the way an operator (or an
attacker) would, and gets back its exit code, output, wall time and peak RSS. The peak RSS
is that program's own: ``VmHWM`` of its process, read every few milliseconds while it
runs (the kernel's ``ru_maxrss`` of a child would also count the test process it was
forked from). An address-space limit well above any budget stops a runaway case long
before it can take the machine down.

The tests judge what an operator sees (exit code, the one error line), never time or
memory: a shared, busy machine makes both noisy. Each case states its budget with
:func:`budget`, which writes the measured figures where ``$WATCHDOG_BUDGETS`` names a file;
``bench/hostile.py`` sets it, runs every case and compares each figure with its budget and
with the start-up of ``watchdog --version`` measured in the same run.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the unit file's MemoryMax: nothing the agent does may need more
MEMORY_MAX_MB = 300
#: a refusal's memory budget: far below the unit's MemoryMax (a plain replay start-up is
#: ~80 MB)
RSS_BOUND_MB = MEMORY_MAX_MB / 2
#: the address-space ceiling of every case (numpy and scikit-learn map a lot of virtual
#: memory they never touch; 2 GiB is far above that and far below a bomb)
AS_LIMIT_MB = 2048


@dataclass
class Outcome:
    """What one bounded run did."""

    rc: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mb: float
    timed_out: bool

    def one_line(self) -> str:
        """The stderr's last non-empty line (the refusal a user sees)."""
        lines = [x for x in self.stderr.splitlines() if x.strip()]
        return lines[-1] if lines else ""


def budget(o: Outcome | None = None, *, work_s: float | None = None,
           rss_mb: float | None = RSS_BOUND_MB, wall_s: float | None = None,
           peak_rss_mb: float | None = None) -> None:
    """State this case's budget: at most ``work_s`` seconds beyond the command's start-up
    and a peak RSS under ``rss_mb``. Nothing is asserted here; the figures measured (from
    ``o``, or ``wall_s``/``peak_rss_mb``) go to the file ``$WATCHDOG_BUDGETS`` names, one
    JSON line per case, for ``bench/hostile.py`` to judge."""
    out = os.environ.get("WATCHDOG_BUDGETS")
    if not out:
        return
    row = {"case": os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0],
           "wall_s": o.wall_s if o is not None else wall_s,
           "peak_rss_mb": o.peak_rss_mb if o is not None else peak_rss_mb,
           "work_s": work_s, "rss_mb": rss_mb}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


def env(**extra: str) -> dict[str, str]:
    """The environment of a case: math libraries single-threaded, no colour, the repo on
    the path (so an editable or plain checkout both work)."""
    e = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    e.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
             PYTHONPATH=str(REPO) + os.pathsep + e.get("PYTHONPATH", ""), NO_COLOR="1")
    e.update(extra)
    return e


def _limits(as_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (as_mb << 20, as_mb << 20))
    os.setsid()  # its own process group, so a timeout kills its children too


def run(args: list[str], *, timeout: float = 30.0, as_mb: int = AS_LIMIT_MB,
        extra_env: dict[str, str] | None = None, stdin: str | None = None,
        cwd: str | Path | None = None, on_start: object = None) -> Outcome:
    """``python -m watchdog ARGS`` bounded by ``timeout`` s of wall time and ``as_mb`` of
    address space. ``on_start(proc)`` (optional) runs once the process has started, for a
    case that has to act on a running agent (send SIGHUP, fill a disk)."""
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "watchdog", *args], cwd=cwd,
                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env(**(extra_env or {})), preexec_fn=lambda: _limits(as_mb))
    out: dict[str, str] = {}

    def pump(name: str, stream: object) -> None:
        out[name] = stream.read()  # type: ignore[attr-defined]

    threads = [threading.Thread(target=pump, args=("out", p.stdout), daemon=True),
               threading.Thread(target=pump, args=("err", p.stderr), daemon=True)]
    for t in threads:
        t.start()
    if stdin is not None:
        assert p.stdin is not None
        p.stdin.write(stdin)
        p.stdin.close()
    killer = threading.Timer(timeout, lambda: _kill(p))
    killer.start()
    peak = PeakRss(p.pid)
    if on_start is not None:
        on_start(p)  # type: ignore[operator]
    try:
        _, status, _usage = os.wait4(p.pid, 0)
    finally:
        killer.cancel()
        peak.stop()
    timed_out = _was_killed(p)
    p.returncode = os.waitstatus_to_exitcode(status)
    for t in threads:
        t.join(timeout=5)
    return Outcome(p.returncode, out.get("out", ""), out.get("err", ""),
                   time.monotonic() - t0, peak.mb, timed_out)


def vm_hwm_mb(pid: int) -> float | None:
    """The peak resident memory of process ``pid`` so far (MB), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakRss:
    """Polls ``VmHWM`` of a running process (the high-water mark only grows, so the last
    reading before it exits is its peak, give or take the last few milliseconds)."""

    def __init__(self, pid: int, every_s: float = 0.005) -> None:
        self.pid = pid
        self.mb = 0.0
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            v = vm_hwm_mb(self.pid)
            if v is not None:
                self.mb = max(self.mb, v)
            self._stop.wait(self._every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)


def _kill(p: subprocess.Popen[str]) -> None:
    p._watchdog_killed = True  # type: ignore[attr-defined]
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _was_killed(p: subprocess.Popen[str]) -> bool:
    return bool(getattr(p, "_watchdog_killed", False))
