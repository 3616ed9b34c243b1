"""A node's week: jobs that change every few hours, as a real node runs them.

The healthy :class:`~watchdog.sources.sim.job.TrainingJob` runs one job for ever; a real
node changes jobs several times a day. A :class:`Schedule` is a seeded list of segments
over the node's GPUs (its hardware: levels, thermal lines, the hot GPU, stay those of the
node's own job):

* **jobs** of 2-8 h, each with its own model size and batch (busy power scaled by
  0.7-1.05), precision (bf16: tensor cores busy; fp32: the low-power phase only), memory
  held (35-93 % of the GPU), number of GPUs in use (all, half or a quarter of them; the
  others idle), start-up (1-3 min) and checkpoints every 20-60 min lasting 1-10 min (a
  one-GPU job never spins in a collective: its checkpoints pause or write);
* **between jobs**: a quick restart (30-120 s idle, memory released), an idle spell
  (5-40 min), or an inference server (30-120 min of short bursts of work, memory held).

Everything is a pure function of ``(seed, t)``, computed a block of ticks at a time with
:func:`watchdog.sources.sim.fast.block` (the same physics and readings as the healthy
node). :func:`chunks` yields frames in the replay frame contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from watchdog import reasons as R
from watchdog.sources.sim import fast, noise
from watchdog.sources.sim import job as J
from watchdog.sources.sim.models import SimulatedGpu
from watchdog.untyped import Array

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.sources.sim.source import SimSource

_S_SEG, _S_LEN, _S_KIND, _S_POW, _S_PREC, _S_HOLD, _S_USE, _S_CK, _S_CKL, _S_SU = range(
    40, 50)
JOB_H = (2.0, 8.0)  # a job's length (h)
CKPT_EVERY_S = (1200.0, 3600.0)
CKPT_LEN_S = (60.0, 600.0)


@dataclass(frozen=True)
class Segment:
    """``[start_s, end_s)`` of the node (s since its start): ``kind`` job, idle or
    inference; for a job, its :class:`VariantJob` and the GPUs in use."""

    start_s: float
    end_s: float
    kind: str
    job: VariantJob | None = None
    gpus: tuple[int, ...] = ()


class VariantJob(J.TrainingJob):
    """One job of the schedule on the node's GPUs: the node's hardware, its own size,
    precision, memory, start-up and (long) checkpoints."""

    def __init__(self, base: J.TrainingJob, seed: int, k: int) -> None:
        scale = noise.uniform(0.7, 1.05, seed, _S_POW)
        fp32 = noise.unit(seed, _S_PREC) < 0.3
        m = base.model
        high = m.busy_low_w * scale if fp32 else min(m.busy_high_w * scale,
                                                     m.power_limit_w)
        model = dataclasses.replace(m, busy_low_w=m.busy_low_w * scale, busy_high_w=high)
        super().__init__(model, base.n, seed)
        for name in ("ambient_c", "c_per_w", "idle_w", "busy_off", "hot_gpu", "gpu_seed"):
            setattr(self, name, getattr(base, name))
        hold = noise.uniform(0.35, 0.93, seed, _S_HOLD)
        self.hold_frac = [hold + 0.02 * (noise.unit(seed, _S_HOLD, g) - 0.5)
                          for g in range(base.n)]
        self.startup_s = noise.uniform(60.0, 180.0, seed, _S_SU)
        self.ckpt_every_s = noise.uniform(*CKPT_EVERY_S, seed, _S_CK)
        self.k = k

    def _ckpt(self, k: int) -> tuple[float, float, int]:
        start, _end, phase = super()._ckpt(k)
        length = noise.uniform(*CKPT_LEN_S, self.seed, _S_CKL, k)
        if self.k == 1 and phase == J.CKPT_REMOTE:  # one GPU: no collective to spin in
            phase = J.CKPT_PAUSE
        return start, start + length, phase


class Schedule:
    """The segments of ``hours`` h of a node (see the module docs)."""

    def __init__(self, base: J.TrainingJob, seed: int, hours: float) -> None:
        self.base = base
        n = base.n
        uses = [n] * 3 + ([n // 2] if n >= 2 else []) + ([n // 4] if n >= 4 else [])
        out: list[Segment] = []
        t, j = 0.0, 0
        while t < hours * 3600.0:
            js = noise.key(seed, _S_SEG, j)
            length = noise.uniform(*JOB_H, js, _S_LEN) * 3600.0
            k = uses[noise.key(js, _S_USE) % len(uses)] if j else n
            out.append(Segment(t, t + length, "job", VariantJob(base, js, k),
                               tuple(range(k))))
            t += length
            v = noise.unit(js, _S_KIND)
            gap = (noise.uniform(30.0, 120.0, js, _S_KIND, 1) if v < 0.5 else
                   noise.uniform(300.0, 2400.0, js, _S_KIND, 2) if v < 0.8 else
                   noise.uniform(1800.0, 7200.0, js, _S_KIND, 3))
            out.append(Segment(t, t + gap, "inference" if v >= 0.8 else "idle"))
            t += gap
            j += 1
        self.segments = out

    def at(self, t_s: float) -> Segment:
        """The segment covering ``t_s``."""
        for s in self.segments:
            if s.start_s <= t_s < s.end_s:
                return s
        return self.segments[-1]

    def changes(self) -> list[float]:
        """Start of every job after the first (s since the node's start)."""
        return [s.start_s for s in self.segments if s.kind == "job" and s.start_s > 0]

    def states(self, t: Array) -> dict[str, Array]:
        """Every GPU's state at times ``t`` (s since start), as ``fast._states`` gives."""
        base = self.base
        m, n = base.model, base.n
        parts: list[dict[str, Array]] = []
        i = 0
        while i < len(t):
            seg = self.at(float(t[i]))
            j = i + int(np.searchsorted(t[i:], seg.end_s, side="left"))
            j = max(j, i + 1)
            parts.append(self._segment(seg, t[i:j], m, n))
            i = j
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def _segment(self, seg: Segment, t: Array, m: SimulatedGpu, n: int) -> dict[str, Array]:
        idle = self._idle(t, m, n, 0.005)
        if seg.kind == "job":
            assert seg.job is not None  # a job segment has its job
            st = fast._states(seg.job, t - seg.start_s)
            off = [g for g in range(n) if g not in seg.gpus]
            for name in st:
                st[name][:, off] = idle[name][:, off]
            return st
        if seg.kind == "idle":
            return idle
        return self._inference(t, m, n)

    def _idle(self, t: Array, m: SimulatedGpu, n: int, mem: float) -> dict[str, Array]:
        shape = (len(t), n)
        tk = np.floor(t * 10.0 + 1e-6).astype(np.int64)[:, None]
        u = fast.unit_at(np.array(self.base._b_pow, dtype=np.uint64), tk)
        z = np.zeros(shape)
        return {"util": z.copy(), "mem_util": z.copy(),
                "power": np.array(self.base.idle_w)[None, :] * (1.0 + 0.02 * (u - 0.5)),
                "sm_mhz": np.full(shape, m.idle_sm_mhz),
                "mem_used": np.full(shape, mem * m.memory_total_mib),
                "sm_act": z.copy(), "sm_occ": z.copy(), "tensor": z.copy(), "dram": z.copy(),
                "pcie_tx": 1.0e3 * u, "pcie_rx": 1.0e3 * u,
                "reasons": np.full(shape, R.GPU_IDLE, dtype=np.int64)}

    def _inference(self, t: Array, m: SimulatedGpu, n: int) -> dict[str, Array]:
        """An inference server: short bursts of work (mean utilization ~20 %)."""
        st = self._idle(t, m, n, 0.7)
        tk = np.floor(t * 10.0 + 1e-6).astype(np.int64)[:, None]
        u = fast.unit_at(np.array(self.base._b_util, dtype=np.uint64), tk)
        util = np.round(np.where(u < 0.35, 100.0 * u / 0.35 * 0.6, 0.0))
        idle_w = np.array(self.base.idle_w)[None, :]
        st["util"] = util
        st["power"] = idle_w + (m.busy_low_w - idle_w) * util / 100.0
        st["sm_mhz"] = np.where(util > 0, m.max_sm_mhz, m.idle_sm_mhz)
        st["sm_act"] = 0.8 * util
        st["reasons"] = np.where(util == 0, R.GPU_IDLE, 0).astype(np.int64)
        return st


def chunks(src: SimSource, schedule: Schedule, duration: float, chunk_ticks: int,
           names: list[str]) -> Iterator[pd.DataFrame]:
    """Frames of ``chunk_ticks`` ticks of ``src`` (a faultless
    :class:`~watchdog.sources.sim.SimSource` read every second) running ``schedule``:
    the block path's chunks (:func:`watchdog.sources.sim.fast.chunks`) with the
    schedule's states, which never go back to the scalar path."""
    def no_scalar(_remaining_s: float) -> Iterator[fast.Chunk]:
        raise RuntimeError("the schedule drove a GPU to its thermal limit")

    for frame, _xids in fast.chunks(src, duration, chunk_ticks, names, no_scalar,
                                    states=schedule.states):
        yield frame


def simulate_schedule(gpus: int, model: str, seed: int, hours: float,
                      chunk_ticks: int = 3600, start: float | None = None
                      ) -> tuple[SimSource, Schedule, Iterator[pd.DataFrame]]:
    """``(source, schedule, frames)`` of a node running its seeded schedule for
    ``hours`` h."""
    from watchdog import catalogue
    from watchdog.sources.sim import SimSource
    from watchdog.sources.sim.frames import SIM_START

    src = SimSource.from_spec("sim:healthy", gpus=gpus, model=model, seed=seed,
                              start=SIM_START if start is None else start)
    sched = Schedule(src.job, seed, hours)
    return src, sched, chunks(src, sched, hours * 3600.0, chunk_ticks, list(catalogue.NAMES))
