"""Faults for the anomaly model, written into copies of real GPU logs (:mod:`.inject`'s
:class:`~watchdog.testing.rawlog.RawLog`: the log's own format, its own noise).

The rules' faults (:mod:`.inject`) end in a state a rule names; these two never do, so
only the model can find them (docs/model.md, issue 19):

* :func:`slowdown`: one GPU does its work on ``frac`` of its normal power (0.65: 35 %
  less) at unchanged utilization and clocks, for ``duration`` s: a GPU that draws less
  than its own normal for the same work (a board or power-delivery fault, a lost NVLink
  peer the job now waits on). Its temperature follows its power down (a GPU's rise above
  its coolest reading is about proportional to its power; time constant 60 s), as it would.
* :func:`temp_drift`: one GPU's temperature climbs ``rate`` C a minute (0.5) above what the
  log shows, with power, utilization and clocks unchanged: a failing fan or clogged
  cold plate, long before any throttle. Found "by +3 C" means found within 6 minutes.

Both insert ``duration`` s of the minute before the onset (:meth:`RawLog.insert`: the node
goes on with what it did) and write the fault over that stretch. Each returns an
:class:`~watchdog.testing.inject.Label` of kind ``anomaly``.

:func:`slowdown_frame` writes the slowdown into a simulated frame instead (the part's own
thermal constants).

:func:`one_gpu` writes one GPU of a multi-GPU log as a log of its own: a 1-GPU node, with
no peers to compare against.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from watchdog.testing.inject import Label
from watchdog.testing.rawlog import RawLog
from watchdog.untyped import Array

if TYPE_CHECKING:
    import pandas as pd

TAU_S = 60.0  # a GPU's thermal time constant (s): the temperature follows power this fast


def _rows(log: RawLog, g: int, lo: float, hi: float) -> tuple[Array, Array]:
    mine = np.flatnonzero(log.gpu == g)
    at = (log.ts[mine] >= lo) & (log.ts[mine] < hi)
    return mine[at], np.flatnonzero(at)


def slowdown(log: RawLog, onset: float, gpu: int, frac: float = 0.65,
             duration: float = 600.0, ramp_s: float = 20.0) -> Label:
    """GPU ``gpu`` draws ``frac`` of its logged power from ``onset`` (POSIX s, reached over
    ``ramp_s``) for ``duration`` s; utilization and clocks as logged; its temperature's
    rise above the GPU's coolest reading shrinks with the power (time constant
    :data:`TAU_S`)."""
    shift = log.insert(onset, duration)
    end = onset + duration
    rows, _ = _rows(log, gpu, onset, end)
    t = log.ts[rows] - onset
    drop = (1.0 - frac) * np.clip(t / ramp_s, 0.0, 1.0)
    log.set("power.draw", rows, log.values("power.draw")[rows] * (1.0 - drop))
    if log.has("temperature.gpu"):
        temp = log.values("temperature.gpu")
        floor = float(np.nanmin(temp[log.gpu == gpu]))
        cool = (1.0 - frac) * (1.0 - np.exp(-t / TAU_S))
        log.set("temperature.gpu", rows, temp[rows] - cool * (temp[rows] - floor))
    return Label("anomaly", (gpu,), onset, end, onset, shift)


def temp_drift(log: RawLog, onset: float, gpu: int, rate: float = 0.5,
               duration: float = 600.0) -> Label:
    """GPU ``gpu``'s temperature climbs ``rate`` C/min from ``onset`` (POSIX s) for
    ``duration`` s over what the log shows; nothing else changes."""
    if not log.has("temperature.gpu"):
        raise ValueError("the log has no temperature column")
    shift = log.insert(onset, duration)
    end = onset + duration
    rows, _ = _rows(log, gpu, onset, end)
    t = log.ts[rows] - onset
    log.set("temperature.gpu", rows, log.values("temperature.gpu")[rows] + rate * t / 60.0)
    return Label("anomaly", (gpu,), onset, end, onset, shift)


def slowdown_frame(frame: pd.DataFrame, gpu: int, onset: float, gpu_model: str,
                   frac: float = 0.65) -> None:
    """:func:`slowdown` on a simulated frame (its ``index``, ``ts``, ``power.draw`` and
    ``temperature.gpu`` columns, changed in place): GPU ``gpu`` draws ``frac`` of its power
    from ``onset`` (epoch s) on, and its temperature follows the lost draw down with the
    simulated part's C per W and time constant, as the simulator's own
    ``power_mismatch`` does (it edits the power before the thermal model)."""
    from watchdog.sources.sim.models import get_model

    part = get_model(gpu_model)
    hit = (frame["index"] == gpu) & (frame["ts"] >= onset)
    dt = frame.loc[hit, "ts"].to_numpy() - onset
    lost = frame.loc[hit, "power.draw"].to_numpy() * (1.0 - frac)
    cool = np.zeros_like(lost)
    for i in range(1, len(lost)):
        a = 1.0 - math.exp(-(dt[i] - dt[i - 1]) / part.tau_s)
        cool[i] = cool[i - 1] + (part.c_per_w * lost[i] - cool[i - 1]) * a
    frame.loc[hit, "power.draw"] -= lost
    frame.loc[hit, "temperature.gpu"] = np.round(frame.loc[hit, "temperature.gpu"] - cool)


def one_gpu(path: Path, mapping: dict[str, str] | None, gpu: int, out: Path) -> Path:
    """GPU ``gpu``'s rows of the multi-GPU log ``path`` (with its header) written to
    ``out``: the same readings as a 1-GPU node's log."""
    log = RawLog(path, mapping)
    keep = [r for r, g in zip(log.rows, log.gpu.tolist(), strict=True) if g == gpu]
    if not keep:
        raise ValueError(f"no rows of GPU {gpu} in {path}")
    out.write_text("\n".join([",".join(log.header), *(",".join(r) for r in keep)]) + "\n")
    return out


def busy_onset(log: RawLog, gpu: int, after: float, span: float = 120.0,
               level: float = 0.8) -> float:
    """The first time (POSIX s) at least ``after`` s into the log at which GPU ``gpu`` has
    worked for the ``span`` s before: utilization >= 80 % where the log has it, else power
    >= ``level`` x the GPU's 99th percentile of power (a log of power only; its highest
    reading may be a spike)."""
    mine = log.gpu == gpu
    t = log.ts[mine]
    if log.has("utilization.gpu"):
        busy = log.values("utilization.gpu")[mine] >= 80.0
    else:
        p = log.values("power.draw")[mine]
        busy = p >= level * float(np.nanpercentile(p, 99))
    start = float(t.min())
    for i in np.flatnonzero(t >= start + max(after, span)):
        near = (t >= t[i] - span) & (t < t[i])
        if near.any() and busy[near].mean() >= 0.95:
            return float(t[i])
    raise ValueError(f"GPU {gpu} never works {span:g} s after {after:g} s")


def size_at(kind: str, frac: float, rate: float, onset: float, t: float | None) -> str:
    """The fault's size at time ``t`` (an alert), in words: ``+2.1 C`` over the line for a
    drift, ``65 % of normal power`` for a slowdown; ``-`` when not found."""
    if t is None or math.isnan(t):
        return "-"
    if kind == "temp_drift":
        return f"+{rate * max(0.0, t - onset) / 60.0:.1f} C"
    return f"{frac * 100:.0f} % of normal power"
