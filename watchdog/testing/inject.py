"""Faults written into copies of real GPU logs, for recall tests on real backgrounds.

A real log (an ``nvidia-smi`` CSV, or any CSV read through a mapping: see
:mod:`watchdog.testing.real_telemetry`) is read as text cells (:class:`RawLog`). A fault is
written in at a labelled time, in the log's own format (units, decimals, hex masks,
leading spaces, timestamp style) and with the log's own noise: every written value keeps
its sample's deviation from the local median of the original series, scaled to the new
level. Then columns can be removed (:meth:`RawLog.drop`: a log without a power limit,
clocks, reason bits, memory total, temperature or GPU name) and the sampling thinned
(:meth:`RawLog.thin`: a logger writing every 10-60 s), and the copy is written out
(:meth:`RawLog.write`) for the replay readers to read as they read the original.

How a fault goes in: the rows of the last minute before the onset are repeated, with
their times moved on, for the fault's duration (:meth:`RawLog.insert`): the node goes on
doing what it did before, and the fault is written over that stretch; the original rows
after the onset follow, shifted by the duration. So a fault fits in any log, however
short, and its background is what the GPUs were doing when it struck. What each fault
writes (documented per function, with the real reports each level comes from):

* :func:`hang`: every busy GPU at 100 % utilization drawing 1.5x its idle power (real
  H100: 123-132 W against 74 W idle, ``real-gpu/h100-spin-hang``), clocks held, memory
  held, no memory traffic, temperature cooling towards idle;
* :func:`stall`: every busy GPU at 0 % with memory held at 1.5x idle power (the real
  H100's checkpoint pauses: 127-130 W), after the job's own work went on long enough
  for a stall to be judged where the log is shorter than that;
* :func:`thermal`: one GPU's temperature climbs to its slowdown point in 90 s, then holds
  there while its power falls 30 % and its clocks 25 % (the SW thermal bit set where the
  log has reason bits): "throttle to hold 84 C; the watts visibly drop";
* :func:`memory_pressure`: one GPU's memory leaks: it grows steadily from its level to
  the limit in 30 min (the real out-of-memory run of ``real-wandb``, mjmj531/hllm, grew
  0.25 % a minute for 43 min), then the job dies of out-of-memory and frees it. (Memory
  filling in a minute and staying high is what a healthy job's allocator does at start;
  it is no fault.)

Each returns a :class:`Label`: the kind, the GPUs and when the signature starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from watchdog.testing.rawlog import RawLog
from watchdog.untyped import Array

__all__ = ["Label", "RawLog", "hang", "memory_pressure", "stall", "thermal"]

HANG_IDLE_FACTOR = 1.5  # a hung or stalled GPU with its CUDA context open, x idle power


@dataclass(frozen=True)
class Label:
    """What was injected: ``kind`` (an incident kind), the GPU indexes as logged, the
    POSIX times (s) its signature starts and ends, and where (POSIX s) rows were inserted
    for it and for how long (s): the original rows from there on come that much later."""

    kind: str
    gpus: tuple[int, ...]
    onset: float
    end: float
    inserted_at: float = 0.0
    inserted_s: float = 0.0

    def moved(self, t: float) -> float:
        """Where an original time ``t`` (POSIX s) lies in the faulted copy."""
        return t + self.inserted_s if self.inserted_s and t >= self.inserted_at else t


def _rows(log: RawLog, g: int, lo: float, hi: float) -> tuple[Array, Array]:
    """GPU ``g``'s rows in ``[lo, hi)`` and their positions among its own rows."""
    mine = np.flatnonzero(log.gpu == g)
    at = (log.ts[mine] >= lo) & (log.ts[mine] < hi)
    return mine[at], np.flatnonzero(at)


def _before(log: RawLog, role: str, g: int, t: float, span: float = 30.0) -> float:
    """GPU ``g``'s median ``role`` over the ``span`` s before ``t`` (NaN if none)."""
    x = log.values(role)
    near = (log.gpu == g) & (log.ts >= t - span) & (log.ts < t)
    return float(np.nanmedian(x[near])) if near.any() and not np.isnan(x[near]).all() \
        else math.nan


def _job_fault(log: RawLog, kind: str, onset: float, duration: float, util: float,
               idle_w: dict[int, float] | float | None, gpus: list[int] | None) -> Label:
    """A hang (util 100) or a stall (util 0) of ``gpus`` (default: every busy GPU)."""
    gpus = gpus if gpus is not None else log.busy_gpus(onset)
    if not gpus:
        raise ValueError(f"no busy GPU before {onset}")
    levels = {}
    for g in gpus:
        own = log.idle_w(g)
        given = idle_w.get(g) if isinstance(idle_w, dict) else idle_w
        base = own if own is not None else given
        if base is None:
            raise ValueError(f"GPU {g}: no idle power in the log and none given")
        levels[g] = HANG_IDLE_FACTOR * base
    shift = log.insert(onset, duration)
    end = onset + duration
    for g in gpus:
        rows, pos = _rows(log, g, onset, end)
        t = log.ts[rows] - onset
        log.set("utilization.gpu", rows, np.full(len(rows), util))
        log.set("utilization.memory", rows, np.zeros(len(rows)))
        power = levels[g] * (1.0 + 0.3 * log.noise("power.draw", g)[pos])
        log.set("power.draw", rows, power)
        for role in ("memory.used", "memory.free", "clocks.sm", "clocks.gr"):
            held = _before(log, role, g, onset)
            log.set(role, rows, np.full(len(rows), held))
        log.set("clocks_event_reasons.active", rows, np.zeros(len(rows)))
        for role in [r for r in log.roles if r.startswith("reason:")]:
            log.set_text(role, rows, " Not Active")
        temp0 = _before(log, "temperature.gpu", g, onset, 10.0)
        if not math.isnan(temp0):
            floor = float(np.nanmin(log.values("temperature.gpu")[log.gpu == g]))
            temp = floor + (temp0 - floor) * np.exp(-t / 60.0)
            log.set("temperature.gpu", rows, np.round(temp))
    return Label(kind, tuple(sorted(gpus)), onset, end, onset, shift)


def hang(log: RawLog, onset: float, duration: float = 480.0, *,
         idle_w: dict[int, float] | float | None = None,
         gpus: list[int] | None = None) -> Label:
    """A hung collective from ``onset`` (POSIX s) for ``duration`` s on ``gpus`` (default:
    every GPU busy in the 30 s before): 100 % util at 1.5x idle power (the log's own idle
    level, else ``idle_w``), clocks and memory held, memory utilization 0, no reason bit,
    temperature cooling towards the GPU's coolest reading (time constant 60 s)."""
    return _job_fault(log, "comm_hang", onset, duration, 100.0, idle_w, gpus)


def stall(log: RawLog, onset: float, duration: float = 600.0, *,
          idle_w: dict[int, float] | float | None = None,
          gpus: list[int] | None = None, lead_s: float = 0.0) -> Label:
    """A stall (host-side hang, dead dataloader): as :func:`hang` with 0 % utilization.
    ``lead_s`` > 0: the job first goes on working for that long (the minute before
    ``onset`` repeated, as for any fault's stretch), so the stall strikes after steady
    work even in a log shorter than the history a stall is judged on (10 min)."""
    if lead_s <= 0:
        return _job_fault(log, "stall", onset, duration, 0.0, idle_w, gpus)
    gpus = gpus if gpus is not None else log.busy_gpus(onset)
    lead = log.insert(onset, lead_s)
    lab = _job_fault(log, "stall", onset + lead, duration, 0.0, idle_w, gpus)
    return Label(lab.kind, lab.gpus, lab.onset, lab.end, onset, lead + lab.inserted_s)


def thermal(log: RawLog, onset: float, slowdown_c: float, gpu: int | None = None,
            duration: float = 300.0, ramp_s: float = 90.0) -> Label:
    """A cooling fault on one GPU (default: the first busy one): its temperature climbs
    from its level at ``onset`` to ``slowdown_c`` + 1 in ``ramp_s``, then holds there
    (its own noise) while its power falls by 30 % and its clocks by 25 % over 20 s, with
    the SW thermal bit (0x20) where the log has reason bits. The label starts when the
    throttle does (``onset + ramp_s``)."""
    g = gpu if gpu is not None else log.busy_gpus(onset, util=80.0)[0]
    shift = log.insert(onset, duration)
    end = onset + duration
    rows, pos = _rows(log, g, onset, end)
    t = log.ts[rows] - onset
    temp0 = _before(log, "temperature.gpu", g, onset, 10.0)
    peak = slowdown_c + 1.0
    temp = np.where(t < ramp_s, temp0 + (peak - temp0) * t / ramp_s, peak)
    temp = temp + 0.5 * np.sign(log.noise("temperature.gpu", g)[pos])
    log.set("temperature.gpu", rows, np.round(temp))
    drop = np.clip((t - ramp_s) / 20.0, 0.0, 1.0)
    for role, by in (("power.draw", 0.30), ("clocks.sm", 0.25), ("clocks.gr", 0.25)):
        log.set(role, rows, log.values(role)[rows] * (1.0 - by * drop))
    hot = rows[t >= ramp_s]
    mask = log.values("clocks_event_reasons.active")[hot]
    log.set("clocks_event_reasons.active", hot,
            np.array([float((int(m) & ~0x4) | 0x20) for m in np.nan_to_num(mask)]))
    if "reason:32" in log.roles:
        log.set_text("reason:32", hot, " Active")
    return Label("thermal_throttle", (g,), onset + ramp_s, end, onset, shift)


def memory_pressure(log: RawLog, onset: float, gpu: int | None = None,
                    total_mib: float | None = None, duration: float = 2100.0,
                    ramp_s: float = 1800.0) -> Label:
    """One GPU leaks from ``onset``: its memory grows steadily from its level to the limit
    of its total (``memory.total``, else used + free + reserved, else ``total_mib``) in
    ``ramp_s``, one allocation-sized step (a few MiB) after another; then the job dies of
    out-of-memory: its memory is freed and its utilization falls to 0 for the rest of the
    inserted ``duration``. ``memory.free`` follows. The label runs from the onset to the
    death: a warning must come before the job dies."""
    g = gpu if gpu is not None else log.gpus()[0]
    total = _before(log, "memory.total", g, onset)
    if math.isnan(total):
        parts = [_before(log, r, g, onset) for r in ("memory.used", "memory.free",
                                                     "memory.reserved")]
        total = float(np.nansum(parts)) if not math.isnan(parts[1]) else math.nan
    if math.isnan(total):
        if total_mib is None:
            raise ValueError("no memory total in the log and none given")
        total = total_mib
    used0 = _before(log, "memory.used", g, onset)
    reserved = _before(log, "memory.reserved", g, onset)
    shift = log.insert(onset, duration)
    end = onset + duration
    rows, _ = _rows(log, g, onset, end)
    t = log.ts[rows] - onset
    dead = t >= ramp_s
    used = np.where(dead, 1.0, used0 + (total - 40.0 - used0) * np.clip(t / ramp_s, 0.0, 1.0))
    log.set("memory.used", rows, np.round(used))
    log.set("memory.free", rows, np.round(total - used - np.nan_to_num(reserved)))
    if dead.any():
        for role in ("utilization.gpu", "utilization.memory"):
            log.set(role, rows[dead], np.zeros(int(dead.sum())))
    return Label("memory_pressure", (g,), onset, onset + ramp_s, onset, shift)
