"""The healthy node, a block of ticks at a time: the same readings as ``SimSource.run``.

``SimSource.sample`` builds every reading in Python, one GPU and one tick at a time
(about 40 us per GPU-tick); a long healthy run (the model bench streams hundreds of
thousands of GPU-hours) spends nearly all its time there. A node with no fault is a
pure function of ``(seed, gpu, t)`` except for its temperature, energy and limiter
counters, so this module computes a whole block of ticks with numpy: the job's phase
per tick, every GPU's state per tick, the counters as cumulative sums, and only the
first-order thermal recurrence as a loop. The result is the frame
:func:`watchdog.sources.sim.frames.simulate_chunks` builds from the scalar path, equal
value for value (``tests/test_sim_fast.py`` compares them over hours of both GPU
models; the expressions below follow ``job.py``, ``node.py`` and ``source.py`` term
for term, in the same order, so the floating point agrees).

Where it applies (:func:`supports`): no fault in the spec and one reading per second
(the grid step of the node's slow state). The thermal controller of ``node.py`` engages
only near the max operating temperature, which a healthy GPU never reaches; should a
block get there, :func:`chunks` hands the node, synchronised to that block's first
tick, back to the scalar path.

Rounding: Python's ``round(x, n)`` rounds the exact binary value; numpy's scales by
``10 ** n`` first, which can differ at a near-tie. Near-ties are re-rounded by Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from watchdog import reasons as R
from watchdog.records import ProcessInfo
from watchdog.serving import serving_value
from watchdog.sources.sim import job as J
from watchdog.sources.sim import noise
from watchdog.sources.sim.node import DT, ECC_BUCKET_S
from watchdog.untyped import Array, JsonDoc

if TYPE_CHECKING:
    import pandas as pd

    from watchdog.records import XidEvent
    from watchdog.sources.sim.node import SimNode
    from watchdog.sources.sim.source import SimSource

#: the GPUs' states at times t (s since start), as :func:`_states` gives them
States = Callable[[Array], dict[str, Array]]
#: one chunk of a simulation: its frame and the XID events in it
Chunk = tuple["pd.DataFrame", list["XidEvent"]]

_U64 = np.uint64
_C1, _C2, _C3 = _U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)


def supports(src: SimSource, interval: float) -> bool:
    """Whether :func:`chunks` reproduces ``src.run(…, interval)``: a faultless node
    read once per grid step, from its start or right after its last reading."""
    return not src.faults and interval == DT and src.node.k == 0 and src._last is None


def unit_at(base: Array, tk: Array) -> Array:
    """:func:`noise.unit_at` over arrays: ``base`` (G,) uint64 keys, ``tk`` (K, 1) ticks."""
    with np.errstate(over="ignore"):
        x: Array = base[None, :] ^ tk.astype(_U64)
        x = x + _C1
        x = (x ^ (x >> _U64(30))) * _C2
        x = (x ^ (x >> _U64(27))) * _C3
        x = x ^ (x >> _U64(31))
    return (x >> _U64(11)).astype(np.float64) * noise._INV


def py_round(x: Array, nd: int) -> Array:
    """``round(v, nd)`` of every element, as Python rounds it (see module docs)."""
    out = np.round(x, nd)
    y = x * 10.0 ** nd
    tie = np.abs(y - np.floor(y) - 0.5) < 1e-6
    if tie.any():
        out[tie] = [round(float(v), nd) for v in x[tie]]
    return out


class _Phases:
    """The job's schedule over a block of times ``t`` (s since start), vectorised
    :meth:`TrainingJob.phase` (startup, checkpoint, high-power block, micro-dip)."""

    def __init__(self, job: J.TrainingJob, t: Array) -> None:
        kind = np.full(len(t), J.TRAIN, dtype=np.int64)
        k = np.floor_divide(t - job.startup_s, job.ckpt_every_s).astype(np.int64)
        in_ckpt = np.zeros(len(t), dtype=bool)
        for off in (1, 0):  # k + 1 first, as checkpoint() tries it
            j = k + off
            for jj in np.unique(j[(j >= 1) & ~in_ckpt]):
                start, end, phase = job._ckpt(int(jj))
                hit = (j == jj) & ~in_ckpt & (start <= t) & (t < end)
                kind[hit] = phase
                in_ckpt |= hit
        startup = t < job.startup_s
        kind[startup] = J.STARTUP
        block = np.floor_divide(t, J.PHASE_BLOCK_S).astype(np.int64)
        high = np.zeros(len(t), dtype=bool)
        for b in np.unique(block):
            high[block == b] = noise.unit(job.seed, J._S_HIGH, int(b)) < 0.45
        dip = np.remainder(t - job.dip_offset_s, job.dip_period_s) < J.DIP_LEN_S
        train = kind == J.TRAIN
        self.kind = kind
        self.high = high & train
        self.dip = dip & train


def _states(job: J.TrainingJob, t: Array) -> dict[str, Array]:
    """Every GPU's healthy state at times ``t`` after the physical bounds: ``(K, G)``
    arrays named as :class:`~watchdog.sources.sim.job.GpuState`'s fields."""
    m, n = job.model, job.n
    K = len(t)
    ph = _Phases(job, t)
    tk = np.floor(t * 10.0 + 1e-6).astype(np.int64)[:, None]
    gi = np.arange(n)[None, :]
    keys = {name: np.array(getattr(job, name), dtype=_U64)
            for name in ("_b_pow", "_b_gpm", "_b_util", "_b_udip", "_b_sync", "_b_mem")}
    hold = np.array(job.hold_frac)[None, :] * m.memory_total_mib
    busy_off = np.array(job.busy_off)[None, :]
    idle_w = np.array(job.idle_w)[None, :]
    u = unit_at(keys["_b_pow"], tk)
    g_act = unit_at(keys["_b_gpm"], tk)
    u_util = unit_at(keys["_b_util"], tk)
    kind = ph.kind[:, None]
    shape = (K, n)
    z = np.zeros(shape)
    st: dict[str, Array] = {
        f: z.copy() for f in ("util", "mem_util", "power", "sm_mhz", "mem_used", "sm_act",
                              "sm_occ", "tensor", "dram", "pcie_tx", "pcie_rx")}
    reasons = np.zeros(shape, dtype=np.int64)

    def put(mask, **vals):  # numpy arrays or floats: left to numpy's broadcasting
        for f, v in vals.items():
            st[f] = np.where(mask, v, st[f])

    # training (job.state: kind == TRAIN)
    tr = np.broadcast_to(kind == J.TRAIN, shape)
    hi = np.broadcast_to(ph.high[:, None], shape)
    lo = tr & ~hi
    hi = tr & hi
    put(tr, mem_used=hold + -40.0 + 80.0 * unit_at(keys["_b_mem"], tk // 100), util=100.0,
        sm_mhz=m.max_sm_mhz)
    put(hi, power=m.busy_high_w * (1.0 + busy_off * 0.3) + 6.0 * (u - 0.5),
        mem_util=35.0 + 20.0 * g_act, sm_act=85.0 + 10.0 * g_act, sm_occ=40.0 + 15.0 * g_act,
        tensor=55.0 + 15.0 * g_act, dram=45.0 + 15.0 * g_act)
    put(lo, power=m.busy_low_w * (1.0 + busy_off) + 6.0 * (u - 0.5),
        mem_util=20.0 + 15.0 * g_act, sm_act=80.0 + 10.0 * g_act, sm_occ=30.0 + 15.0 * g_act,
        tensor=8.0 + 12.0 * g_act, dram=20.0 + 15.0 * g_act)
    dip = tr & ph.dip[:, None]
    f = 0.80 + 0.13 * u_util
    put(dip, util=np.round(100.0 * f), power=st["power"] * (0.5 + 0.5 * f),
        sm_act=st["sm_act"] * f, tensor=st["tensor"] * f)
    udip = tr & ~dip & (unit_at(keys["_b_udip"], tk) < 0.04)
    du = 100.0 - np.round(3.0 + 17.0 * u_util)
    put(udip, util=du, power=st["power"] * (0.9 + 0.1 * du / 100.0))
    cap = tr & (st["power"] >= 0.975 * m.power_limit_w)
    put(cap, power=np.minimum(st["power"], m.power_limit_w - 1.0 * u),
        sm_mhz=m.max_sm_mhz * (0.84 + 0.06 * g_act))
    reasons |= np.where(cap, R.SW_POWER_CAP, 0)
    if n > 1:
        sync_p = np.where(hi, 0.6, 0.35)
        reasons |= np.where(tr & (unit_at(keys["_b_sync"], tk) < sync_p), R.SYNC_BOOST, 0)
    put(tr, pcie_tx=3.0e5 + 1.2e6 * u, pcie_rx=3.0e5 + 1.2e6 * (1.0 - u))
    # start-up
    su = np.broadcast_to(kind == J.STARTUP, shape)
    frac = (t / job.startup_s)[:, None]
    put(su, mem_used=500.0 + (hold - 500.0) * frac, util=np.where(u_util < 0.3, 1.0, 0.0),
        power=m.startup_w * (0.85 + 0.3 * u), sm_mhz=m.max_sm_mhz, sm_act=1.0 * u,
        dram=2.0 * u, pcie_rx=2.0e6 + 6.0e6 * u, pcie_tx=5.0e4 + 1.0e5 * u)
    # waiting in a collective: the remote writer, or every rank but 0 while rank 0 writes
    rank0 = kind == J.CKPT_RANK0
    spin = (kind == J.CKPT_REMOTE) | (rank0 & (gi != 0))
    put(spin, mem_used=hold, util=100.0, power=m.spin_w * (1.0 + 0.15 * u),
        sm_mhz=m.max_sm_mhz, mem_util=1.0 * u, sm_act=1.0 + 3.0 * u, sm_occ=1.0 + 2.0 * u,
        dram=0.5 * u, pcie_tx=2.0e4 + 3.0e4 * u, pcie_rx=2.0e4 + 3.0e4 * u)
    # rank 0 writing, or every GPU paused
    writing = rank0 & (gi == 0)
    pause = np.broadcast_to(kind == J.CKPT_PAUSE, shape)
    put(writing, mem_used=hold, util=np.round(3.0 * u), power=idle_w + 25.0 + 10.0 * u,
        sm_mhz=m.max_sm_mhz, sm_act=1.0 * u, pcie_tx=5.0e6 + 7.0e6 * u, pcie_rx=2.0e4 * u)
    put(pause, mem_used=hold, util=0.0, power=idle_w + 10.0 + 10.0 * u,
        sm_mhz=m.idle_sm_mhz, sm_act=0.0, pcie_tx=1.0e4 * u, pcie_rx=2.0e4 * u)
    reasons |= np.where(st["util"] == 0.0, R.GPU_IDLE, 0)
    # physical bounds (node._physics, below the thermal controller)
    st["power"] = np.minimum(np.maximum(st["power"], idle_w), m.power_limit_w)
    st["sm_mhz"] = np.minimum(np.maximum(st["sm_mhz"], m.idle_sm_mhz), m.max_sm_mhz)
    st["util"] = np.minimum(np.maximum(st["util"], 0.0), 100.0)
    st["mem_used"] = np.minimum(np.maximum(st["mem_used"], 0.0), m.memory_total_mib)
    st["reasons"] = reasons
    return st


def _integrate(node: SimNode, power: Array, reasons: Array, limit_c: float
               ) -> dict[str, Array] | None:
    """The node's slow state (temperature, energy, limiter seconds) at each of the block's
    K ticks (before that tick's step), read from and written back to the
    :class:`~watchdog.sources.sim.node.SimNode`; advances the node past the block. None
    (node untouched) where a GPU reaches ``limit_c``, the thermal controller's threshold."""
    job = node.job
    K, n = power.shape
    a = math.exp(-DT / job.model.tau_s)
    temp = np.empty((K + 1, n))
    for g in range(n):
        tss = (job.ambient_c[g] + job.c_per_w[g] * 1.0 * power[:, g]).tolist()
        x = node.temp[g]
        col = [x]
        cap = node.cap_c
        for s in tss:
            x = min(cap, s + (x - s) * a)
            col.append(x)
        temp[:, g] = col
    if (temp[:K] >= limit_c).any():
        return None

    def counter(start: list[float], step: Array) -> Array:
        acc = np.empty((K + 1, n))
        acc[0] = start
        acc[1:] = step
        return np.cumsum(acc, axis=0)  # sequential, as += per tick

    out = {"temp": temp[:K],
           "energy": counter(node.energy, power * DT),
           "v_power": counter(node.v_power, np.where(reasons & R.SW_POWER_CAP, DT, 0.0)),
           "v_thermal": counter(node.v_thermal, np.where(reasons & R.THERMAL, DT, 0.0)),
           "v_sync": counter(node.v_sync, np.where(reasons & R.SYNC_BOOST, DT, 0.0))}
    node.temp = temp[K].tolist()
    for name in ("energy", "v_power", "v_thermal", "v_sync"):
        setattr(node, name, out[name][K].tolist())
        out[name] = out[name][:K]
    node.k += K
    node._grid = None
    return out


def _ecc(node: SimNode, t: Array) -> Array:
    """:meth:`SimNode.ecc_corrected` of every GPU at times ``t``: ``(K, G)``."""
    b = np.floor_divide(t, ECC_BUCKET_S).astype(np.int64)
    out = np.empty((len(t), node.job.n))
    for g in range(node.job.n):
        node.ecc_corrected(g, float(t[-1]))  # fills the buckets up to the last
        cum = np.array(node._ecc_cum[g], dtype=np.float64)
        at = np.array([np.inf if x is None else x for x in node._ecc_at[g]])
        out[:, g] = node.ecc_base[g] + cum[b] + (t >= at[b])
    return out


def block(src: SimSource, i0: int, count: int, states: States | None = None
          ) -> dict[str, Array] | None:
    """Readings of ticks ``i0 .. i0 + count - 1`` as ``(K, G)`` arrays per metric name
    (plus ``ts``), or None where the thermal controller would engage (see module docs).
    ``states(t)``: the GPUs' states at times ``t`` (s since start) as :func:`_states`
    gives them, for a node that runs something else than one job (a schedule of jobs:
    :mod:`watchdog.sources.sim.schedule`); default the node's job."""
    m = src.model
    ts = src.start + np.arange(i0, i0 + count, dtype=np.int64).astype(np.float64) * DT
    t = ts - src.start
    st = _states(src.job, t) if states is None else states(t)
    slow = _integrate(src.node, st["power"], st["reasons"], m.temp_max_operating_c - 1.0)
    if slow is None:
        return None
    shape = st["power"].shape

    def const(v: float) -> Array:
        return np.full(shape, float(v))

    sm = np.minimum(m.max_sm_mhz, 15.0 * np.round(st["sm_mhz"] / 15.0))
    temp = slow["temp"]
    gpm = (lambda x: py_round(x, 2)) if m.gpm else (lambda x: const(np.nan))
    nvl = const(0.0) if m.nvlink else const(np.nan)
    serving = serving_value((ProcessInfo(pid=src.job.pids[0], serving=False),))
    out: dict[str, Array] = {
        "ts": ts,
        "utilization.gpu": np.round(st["util"]),
        "utilization.memory": np.round(st["mem_util"]),
        "memory.used": np.round(st["mem_used"]),
        "memory.total": const(m.memory_total_mib),
        "power.draw": py_round(st["power"], 2),
        "enforced.power.limit": const(m.power_limit_w),
        "energy.total": py_round(slow["energy"], 3),
        "temperature.gpu": np.round(temp),
        "temperature.memory": np.round(temp + m.mem_temp_offset_c),
        "fan.speed": const(np.nan),
        "clocks.sm": sm,
        "clocks.mem": const(m.max_mem_mhz),
        "clocks.gr": sm,
        "clocks_event_reasons.active": st["reasons"].astype(np.float64),
        "pstate": const(0.0),
        "violation.power": py_round(slow["v_power"], 3),
        "violation.thermal": py_round(slow["v_thermal"], 3),
        "violation.sync_boost": py_round(slow["v_sync"], 3),
        "violation.reliability": const(0.0),
        "gpm.sm_activity": gpm(st["sm_act"]),
        "gpm.sm_occupancy": gpm(st["sm_occ"]),
        "gpm.tensor_activity": gpm(st["tensor"]),
        "gpm.dram_bandwidth": gpm(st["dram"]),
        "ecc.errors.corrected.volatile.total": _ecc(src.node, t),
        "ecc.errors.uncorrected.volatile.total": const(0.0),
        "ecc.errors.uncorrected.aggregate.total": const(0.0),
        "retired_pages.pending": const(np.nan),
        "retired_pages.count": const(np.nan),
        "remapped_rows.correctable": const(0.0),
        "remapped_rows.uncorrectable": const(0.0),
        "remapped_rows.pending": const(0.0),
        "remapped_rows.failure": const(0.0),
        "pcie.link.gen.current": const(m.pcie_max_gen),
        "pcie.link.width.current": const(m.pcie_max_width),
        "pcie.replay_counter": np.broadcast_to(np.array(src.node.replay_base), shape) + 0.0,
        "pcie.tx_throughput": np.round(st["pcie_tx"]),
        "pcie.rx_throughput": np.round(st["pcie_rx"]),
        "nvlink.errors.crc_flit": nvl,
        "nvlink.errors.crc_data": nvl,
        "nvlink.errors.replay": nvl,
        "nvlink.errors.recovery": nvl,
        "processes.serving": const(np.nan if serving is None else serving),
    }
    src._last = float(ts[-1])
    return out


def chunks(src: SimSource, duration: float, chunk_ticks: int, names: list[str] | None,
           scalar: Callable[[float], Iterator[Chunk]], states: States | None = None
           ) -> Iterator[Chunk]:
    """``(frame, xids)`` chunks of ``chunk_ticks`` ticks, as
    :func:`watchdog.pipeline.replay._chunks` yields them; ``names`` the catalogue order;
    ``scalar(remaining_s)`` continues on the scalar path (see module docs); ``states``
    as for :func:`block` (a node running a schedule of jobs)."""
    import pandas as pd

    n_ticks = int(duration / DT + 1e-9)
    n = src.n
    uuids = np.array(src.uuids, dtype=object)
    keep: list[str] | None = None
    i = 0
    while i < n_ticks:
        count = min(chunk_ticks, n_ticks - i)
        vals = block(src, i, count, states=states)
        if vals is None:
            yield from scalar((n_ticks - i) * DT)
            return
        data: JsonDoc = {"ts": np.repeat(vals["ts"], n),
                                "uuid": np.tile(uuids, count),
                                "index": np.tile(np.arange(n, dtype=np.int64), count),
                                "lost": np.zeros(count * n, dtype=bool)}
        if keep is None:
            keep = [x for x in names or [] if x in vals and not np.isnan(vals[x]).all()]
        for name in keep:
            data[name] = vals[name].reshape(-1)
        frame = pd.DataFrame(data)
        frame["uuid"] = frame["uuid"].astype(str)
        yield frame, []
        i += count
