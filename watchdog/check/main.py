"""From parsed ``watchdog check`` arguments to a :class:`~watchdog.check.judge.Verdict`.

Per source kind:

* ``nvml``: the real wall clock; readings ``--interval`` apart within ``--duration`` counted
  from before NVML start-up (a slow start-up leaves fewer readings, not a longer check).
* ``sim…``: a :class:`~watchdog.clock.ManualClock`, so the simulated node runs as fast as the
  CPU allows. Its history is placed so that the judged moment (``--at`` after its start) is
  now. The default ``--at`` comes from the scenario's ground truth: the last fault's onset
  plus its time to show plus a margin (:func:`default_at`).
* a log or recording: its last ``--duration`` of samples; the judged moment is its last
  timestamp.

Every option has a range (:data:`RANGES`): a probe is short, the daemon is what watches
for longer. ``--duration`` 0 to 10 min, ``--interval`` 100 ms to 1 h (the daemon's),
``--call-timeout`` 100 ms to 1 min (the daemon's ``call_timeout``), ``--at`` (given, or
from the scenario) at most 1 day: the simulated node is advanced second by second to it
(about 7 s of CPU per simulated day). Out of range is one line and UNKNOWN (3).

Heavy modules (the replay readers, pandas) are imported only for a log source.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import replace
from typing import TYPE_CHECKING

from watchdog.check.judge import Problem, Status, Verdict, judge
from watchdog.check.probe import Burst, burst_live, burst_recorded
from watchdog.clock import Clock, ManualClock, WallClock

if TYPE_CHECKING:
    from watchdog.detect import RuleSet
    from watchdog.sources import SourceOptions
    from watchdog.sources.base import LiveSource

HEALTHY_AT_S = 600.0
"""Default judged moment (s after start) of a simulated node without faults: past job
start-up, a few steps and the first checkpoint pause."""

SHOW_S = 30.0
"""Time (s) after a fault's onset for it to be unmistakable in the readings (temperature
climbing to the slowdown point, memory at the limit for the whole burst)."""

EVENT_SHOW_S = 1.0
"""For an XID (an event, not a state) the burst must contain the event itself."""

RANGES: dict[str, tuple[float, float]] = {
    "--duration": (0.0, 600.0),
    "--interval": (0.1, 3600.0),
    "--call-timeout": (0.1, 60.0),
    "--at": (0.0, 86400.0),
}
"""The range (s, both ends included) of each duration option of the probe."""

WARMUP_STEP_S = 1.0
"""Step (s) at which a simulated node is advanced before the burst (its readings are
discarded): the simulator keeps state (temperatures, counters) that needs a history."""


def default_at(source: LiveSource) -> float:
    """Seconds after a simulated node's start at which its last injected fault shows.

    From ``source.ground_truth()`` (faults with ``kind``, ``onset`` and ``end`` in POSIX
    seconds): the last fault's onset plus :data:`SHOW_S` (:data:`EVENT_SHOW_S` for an XID),
    but no later than the fault's end, so a fault with ``for=`` is judged while active.
    :data:`HEALTHY_AT_S` when nothing is injected.
    """
    truth = getattr(source, "ground_truth", None)
    start = float(getattr(source, "start", 0.0))
    ats = []
    for f in (truth() if callable(truth) else []):
        onset = float(f.onset) - start
        at = onset + (EVENT_SHOW_S if f.kind == "xid" else SHOW_S)
        if f.end is not None and f.end > f.onset:
            at = min(at, float(f.end) - start)
        ats.append(at)
    return max(ats) if ats else HEALTHY_AT_S


def probe(args: argparse.Namespace, options: SourceOptions, clock: Clock | None = None
          ) -> Verdict:
    """Open the source named by ``args.source`` (with ``options``, the command line's
    :class:`~watchdog.sources.SourceOptions`), collect one burst and judge it.

    ``clock`` replaces the wall clock of the ``nvml`` source (tests).
    """
    from watchdog.sources import kind_of, open_live, open_recorded

    options = replace(options, call_timeout=args.call_timeout)
    kind = kind_of(args.source)
    check_ranges(args)
    if kind == "replay":
        rec = open_recorded(args.source, options)
        burst = burst_recorded(rec.host, rec.devices(), rec.ticks(), args.duration)
        checked_at = burst.end
    elif kind == "sim":
        burst, checked_at = _sim_burst(args, options)
    else:
        clock = clock or WallClock()
        started = clock.now()  # the --duration budget includes NVML start-up
        source = open_live(args.source, options, started)
        try:
            burst = burst_live(source, clock, args.duration, args.interval, t0=started,
                               between=lambda: _rules(args))
        finally:
            source.close()
        checked_at = clock.now()
    return _judge(args, burst, checked_at)


def check_ranges(args: argparse.Namespace) -> None:
    """Each duration option within its :data:`RANGES` entry, else an
    :class:`~watchdog.errors.InputError` naming it, its value and the range."""
    for option, (lo, hi) in RANGES.items():
        value = getattr(args, option[2:].replace("-", "_"), None)
        if value is not None and not lo <= value <= hi:
            _out_of_range(option, value, lo, hi)


def _out_of_range(option: str, value: float, lo: float, hi: float, why: str = "") -> None:
    from watchdog.errors import InputError
    from watchdog.units import format_duration

    raise InputError(f"{option} {format_duration(value)}: out of range "
                     f"({format_duration(lo)} to {format_duration(hi)}){why}")


def _sim_burst(args: argparse.Namespace, options: SourceOptions) -> tuple[Burst, float]:
    from watchdog.sources import open_live

    now = WallClock().now()
    probe_src = open_live(args.source, options, 0.0)
    at = args.at if args.at is not None else default_at(probe_src)
    probe_src.close()
    lo, hi = RANGES["--at"]
    if not lo <= at <= hi:  # the default: a fault set that far into the node's history
        _out_of_range("--at", at, lo, hi, " (the default: when the last fault shows; "
                      "give an earlier onset or --at)")
    start = now - at
    clock = ManualClock(start=start)
    source = open_live(args.source, options, start)
    try:
        devices = source.devices()
        burst_from = start + max(0.0, at - args.duration)
        t = start
        while t < burst_from:
            source.sample(t)
            t = min(t + WARMUP_STEP_S, burst_from)
        clock.sleep_until(burst_from)
        burst = burst_live(source, clock, args.duration, args.interval, devices)
    finally:
        source.close()
    return burst, clock.now()


def _rules(args: argparse.Namespace) -> RuleSet:
    """The rule set (``--rules``, else the shipped rules) with the engine imported, loaded
    once per probe: between the first and second live reading when there is a wait."""
    cached = getattr(args, "_rule_set", None)
    if cached is None:
        import watchdog.check.rules  # noqa: F401  (the engine: numpy, the evaluator)
        from watchdog.detect.loader import load_rules

        cached = args._rule_set = load_rules(getattr(args, "rules", None))
    return cached


def _judge(args: argparse.Namespace, burst: Burst, checked_at: float) -> Verdict:
    rules = _rules(args)
    return judge(burst.devices, burst.samples, host=burst.host, checked_at=checked_at,
                 expected_gpus=args.expect_gpus, source=args.source, duration_s=burst.span,
                 rules=rules)


def unknown(args: argparse.Namespace, message: str) -> Verdict:
    """The verdict when the probe could not judge at all (exit 3)."""
    host = getattr(args, "host", None) or socket.gethostname()
    return Verdict(host=host, checked_at=WallClock().now(), gpus=[],
                   problems=[Problem(Status.UNKNOWN, "probe", message)],
                   expected_gpus=getattr(args, "expect_gpus", None),
                   source=getattr(args, "source", "nvml"))
