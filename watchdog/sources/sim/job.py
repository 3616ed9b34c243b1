"""The healthy training job: what a detector must NOT alarm on.

A data-parallel job with one rank per GPU, as seen on the real 8x H100 log in
``real-telemetry/karpathy__nanoGPT`` and in the issue threads DESIGN.md quotes:

* **start-up** (60-120 s): 0-1 % util at ~110-150 W on H100, clocks raised, memory
  climbing as the model and optimiser state load;
* **training**: ~100 % util in two busy power phases (~390 W and ~690 W on H100, chosen
  per 240 s block), the high one at the power cap with SW power cap (0x4) set and clocks
  pulled down, sync boost (0x10) set much of the time, short per-GPU utilization dips,
  and a node-wide ~1.5 s micro-dip every 20-22 s;
* **checkpoints** every 10-20 min lasting 30-120 s, three variants: rank 0 writes while
  the other ranks spin inside a collective at 100 % util and near-idle power with clocks
  up and no limiter bits (the trap that looks exactly like a hung NCCL kernel); the
  writer is on another node of a multi-node job, so every GPU here spins that way; or
  all GPUs pause at 0 % util with memory held;
* the PyTorch caching allocator holds 88-93 % of memory; one GPU runs 10-20 C hotter.

Everything here is a pure function of ``(seed, gpu, t)`` with ``t`` in seconds since the
node started, so the state at ``t`` does not depend on the sampling interval.
"""

from __future__ import annotations

from watchdog import reasons as R
from watchdog.sources.sim import noise
from watchdog.sources.sim.models import SimulatedGpu

# Job phases (small ints: compared on the hot path).
STARTUP, TRAIN, CKPT_RANK0, CKPT_PAUSE, CKPT_REMOTE = 0, 1, 2, 3, 4
PHASE_NAMES = {STARTUP: "startup", TRAIN: "train", CKPT_RANK0: "checkpoint_rank0_writes",
               CKPT_PAUSE: "checkpoint_all_pause", CKPT_REMOTE: "checkpoint_remote_writer"}

PHASE_BLOCK_S = 240.0  # length of a busy-power phase block
DIP_LEN_S = 1.5  # node-wide micro-dip length
HOT_OFFSET_C = 14.0  # the one hotter GPU (worse airflow / coolant position)

# noise stream ids (any distinct ints)
_S_STARTUP, _S_CKPT_EVERY, _S_DIP_P, _S_DIP_OFF, _S_HIGH, _S_HOLD = 1, 2, 3, 4, 5, 6
_S_HOT, _S_AMB, _S_C, _S_IDLE, _S_OFF, _S_CKPT_LEN, _S_CKPT_VAR = 7, 8, 9, 10, 11, 12, 13
_S_PID, _S_JOB, _S_POW, _S_UTIL, _S_UDIP, _S_SYNC, _S_GPM, _S_MEM, _S_ENERGY = (
    14, 15, 16, 17, 18, 19, 20, 21, 22)
_S_NODE = 23


class GpuState:
    """What one GPU is doing at one instant, before physics (temperature) is applied.

    Units: util and activity in %, power in W, clocks in MHz, memory in MiB, PCIe
    throughput in KB/s. Faults edit these fields; ``cooling`` (thermal-resistance
    multiplier) and ``tau_s`` are read by the node's thermal model, the ``ecc_*``,
    ``remap_*``, ``replay_*`` and ``nvlink_*`` fields are added to the node's counters.
    """

    __slots__ = ("cooling", "dram", "ecc_unc", "lost", "mem_mhz", "mem_used", "mem_util",
                 "nvlink_extra",
                 "pcie_gen", "pcie_rx", "pcie_tx", "pcie_width", "power", "process", "reasons",
                 "remap_pending", "replay_extra", "serving", "sm_act", "sm_mhz", "sm_occ",
                 "tau_s", "tensor", "util")

    def __init__(self) -> None:
        self.util = 0.0
        self.mem_util = 0.0
        self.power = 0.0
        self.sm_mhz = 0.0
        self.mem_mhz = 0.0  # memory clock; 0 = the model's maximum (HBM runs at full speed)
        self.reasons = 0
        self.mem_used = 0.0
        self.sm_act = 0.0
        self.sm_occ = 0.0
        self.tensor = 0.0
        self.dram = 0.0
        self.process = True
        self.serving = False  # the process is an inference server (vLLM...), not a trainer
        self.pcie_gen = 0
        self.pcie_width = 0
        self.pcie_tx = 0.0
        self.pcie_rx = 0.0
        self.lost = False
        self.cooling = 1.0
        self.tau_s = 0.0
        self.ecc_unc = 0  # uncorrected ECC errors added by a fault (count)
        self.remap_pending = 0  # 1 while a row remap waits for a reset
        self.replay_extra = 0  # PCIe replays added by a fault (count)
        self.nvlink_extra = 0  # NVLink CRC flit errors added by a fault (count)


class TrainingJob:
    """A seeded healthy job on ``n`` GPUs of ``model``; see the module docstring."""

    def __init__(self, model: SimulatedGpu, n: int, seed: int, node: int = 0) -> None:
        self.model = model
        self.n = n
        self.seed = seed  # the job: its schedule (start-up, checkpoints, phases) and id
        # the node: its GPUs (levels, noise, UUIDs); node 0 is the seed's own node, so a
        # single simulated node is what it always was. The nodes of one multi-node job
        # share the seed and differ in ``node`` (``sim:node(id=K)``): they checkpoint and
        # change phase together, as a real job's nodes do.
        self.node = node
        self.gpu_seed = seed if node == 0 else noise.key(seed, _S_NODE, node)
        self.slurm_job_id = str(100000 + noise.key(seed, _S_JOB) % 900000)
        s = seed
        self.startup_s = noise.uniform(60.0, 120.0, s, _S_STARTUP)
        self.ckpt_every_s = noise.uniform(600.0, 1200.0, s, _S_CKPT_EVERY)
        self.dip_period_s = noise.uniform(20.0, 22.0, s, _S_DIP_P)
        self.dip_offset_s = noise.uniform(0.0, self.dip_period_s, s, _S_DIP_OFF)
        s = self.gpu_seed
        self.hot_gpu = noise.key(s, _S_HOT) % n
        m = model
        self.hold_frac = [noise.uniform(0.88, 0.93, s, _S_HOLD, g) for g in range(n)]
        self.ambient_c = [m.ambient_c + noise.uniform(-1.5, 2.5, s, _S_AMB, g)
                          + (HOT_OFFSET_C if g == self.hot_gpu else 0.0) for g in range(n)]
        # the hot GPU's sensor sits higher at idle but rises a little less under load
        # (nanoGPT log: 42-48 C idle vs 22-25 C, 73 C vs 53-69 C at 690 W)
        self.c_per_w = [m.c_per_w * noise.uniform(0.93, 1.07, s, _S_C, g)
                        * (0.85 if g == self.hot_gpu else 1.0) for g in range(n)]
        self.idle_w = [m.idle_w * noise.uniform(0.95, 1.06, s, _S_IDLE, g)
                       * (1.08 if g == self.hot_gpu else 1.0) for g in range(n)]
        self.busy_off = [noise.uniform(-0.035, 0.035, s, _S_OFF, g) for g in range(n)]
        pid0 = 2000 + noise.key(s, _S_PID) % 60000
        self.pids = [pid0 + 7 * g for g in range(n)]
        # energy used since the driver loaded, before this job (J): days of operation
        self.energy_base = [noise.uniform(2.0e7, 4.0e8, s, _S_ENERGY, g) for g in range(n)]
        # per-GPU noise bases for the per-tick draws (see noise.unit_at)
        self._b_pow, self._b_gpm, self._b_util, self._b_udip, self._b_sync, self._b_mem = (
            [noise.key(s, stream, g) for g in range(n)]
            for stream in (_S_POW, _S_GPM, _S_UTIL, _S_UDIP, _S_SYNC, _S_MEM))

    # --- job-level schedule (shared by every GPU at time t) ---------------------------

    def _ckpt(self, k: int) -> tuple[float, float, int]:
        """``(start_s, end_s, phase)`` of checkpoint number ``k`` (``k >= 1``)."""
        start = self.startup_s + k * self.ckpt_every_s
        length = noise.uniform(30.0, 120.0, self.seed, _S_CKPT_LEN, k)
        v = noise.unit(self.seed, _S_CKPT_VAR, k)
        phase = CKPT_RANK0 if v < 0.5 else CKPT_REMOTE if v < 0.7 else CKPT_PAUSE
        return start, start + length, phase

    def checkpoint(self, t: float) -> tuple[int, float, float, int] | None:
        """``(number, start_s, end_s, phase)`` of the checkpoint covering ``t``, or None."""
        k = int((t - self.startup_s) // self.ckpt_every_s)
        for j in (k + 1, k):  # k + 1: float rounding right at a checkpoint's start
            if j >= 1:
                start, end, phase = self._ckpt(j)
                if start <= t < end:
                    return j, start, end, phase
        return None

    def checkpoints(self, until: float) -> list[tuple[float, float, str]]:
        """Every checkpoint ``(start_s, end_s, variant)`` that begins before ``until``."""
        out = []
        k = 1
        while (c := self._ckpt(k))[0] < until:
            out.append((c[0], c[1], PHASE_NAMES[c[2]]))
            k += 1
        return out

    def phase(self, t: float) -> tuple[int, bool, bool]:
        """``(phase, high_power, micro_dip)`` of the job at ``t`` (s since start)."""
        if t < self.startup_s:
            return STARTUP, False, False
        c = self.checkpoint(t)
        if c is not None:
            return c[3], False, False
        high = noise.unit(self.seed, _S_HIGH, int(t // PHASE_BLOCK_S)) < 0.45
        dip = (t - self.dip_offset_s) % self.dip_period_s < DIP_LEN_S
        return TRAIN, high, dip

    # --- per-GPU state ---------------------------------------------------------------

    def state(self, g: int, t: float, phase: tuple[int, bool, bool], tk: int) -> GpuState:
        """The healthy state of GPU ``g`` at ``t`` in ``phase``; ``tk`` is the noise tick."""
        m = self.model
        st = GpuState()
        st.tau_s = m.tau_s
        st.pcie_gen = m.pcie_max_gen
        st.pcie_width = m.pcie_max_width
        hold = self.hold_frac[g] * m.memory_total_mib
        kind, high, dip = phase
        u = noise.unit_at(self._b_pow[g], tk)
        if kind == TRAIN:
            st.mem_used = hold + -40.0 + 80.0 * noise.unit_at(self._b_mem[g], tk // 100)
            st.util = 100.0
            st.sm_mhz = m.max_sm_mhz
            g_act = noise.unit_at(self._b_gpm[g], tk)
            if high:
                st.power = m.busy_high_w * (1.0 + self.busy_off[g] * 0.3) + 6.0 * (u - 0.5)
                st.mem_util = 35.0 + 20.0 * g_act
                st.sm_act, st.sm_occ = 85.0 + 10.0 * g_act, 40.0 + 15.0 * g_act
                st.tensor, st.dram = 55.0 + 15.0 * g_act, 45.0 + 15.0 * g_act
                sync_p = 0.6
            else:
                st.power = m.busy_low_w * (1.0 + self.busy_off[g]) + 6.0 * (u - 0.5)
                st.mem_util = 20.0 + 15.0 * g_act
                st.sm_act, st.sm_occ = 80.0 + 10.0 * g_act, 30.0 + 15.0 * g_act
                st.tensor, st.dram = 8.0 + 12.0 * g_act, 20.0 + 15.0 * g_act
                sync_p = 0.35
            if dip:  # node-wide micro-dip (data loading / logging step)
                f = 0.80 + 0.13 * noise.unit_at(self._b_util[g], tk)
                st.util = round(100.0 * f)
                st.power *= 0.5 + 0.5 * f
                st.sm_act *= f
                st.tensor *= f
            elif noise.unit_at(self._b_udip[g], tk) < 0.04:  # short per-GPU utilization dip
                st.util = 100.0 - round(3.0 + 17.0 * noise.unit_at(self._b_util[g], tk))
                st.power *= 0.9 + 0.1 * st.util / 100.0
            if st.power >= 0.975 * m.power_limit_w:
                st.power = min(st.power, m.power_limit_w - 1.0 * u)
                st.reasons |= R.SW_POWER_CAP
                st.sm_mhz = m.max_sm_mhz * (0.84 + 0.06 * g_act)
            if self.n > 1 and noise.unit_at(self._b_sync[g], tk) < sync_p:
                st.reasons |= R.SYNC_BOOST
            st.pcie_tx = 3.0e5 + 1.2e6 * u
            st.pcie_rx = 3.0e5 + 1.2e6 * (1.0 - u)
        elif kind == STARTUP:
            frac = t / self.startup_s
            st.mem_used = 500.0 + (hold - 500.0) * frac
            st.util = 1.0 if noise.unit_at(self._b_util[g], tk) < 0.3 else 0.0
            st.power = m.startup_w * (0.85 + 0.3 * u)
            st.sm_mhz = m.max_sm_mhz
            st.sm_act = 1.0 * u
            st.dram = 2.0 * u
            st.pcie_rx = 2.0e6 + 6.0e6 * u
            st.pcie_tx = 5.0e4 + 1.0e5 * u
        elif kind == CKPT_REMOTE or (kind == CKPT_RANK0 and g != 0):  # waiting in a collective
            st.mem_used = hold
            st.util = 100.0
            st.power = m.spin_w * (1.0 + 0.15 * u)
            st.sm_mhz = m.max_sm_mhz
            st.mem_util = 1.0 * u
            st.sm_act, st.sm_occ = 1.0 + 3.0 * u, 1.0 + 2.0 * u
            st.dram = 0.5 * u
            st.pcie_tx = st.pcie_rx = 2.0e4 + 3.0e4 * u
        else:  # rank 0 writing the checkpoint, or every GPU paused: 0 % util, memory held
            st.mem_used = hold
            writing = kind == CKPT_RANK0
            st.util = round(3.0 * u) if writing else 0.0
            st.power = self.idle_w[g] + (25.0 if writing else 10.0) + 10.0 * u
            st.sm_mhz = m.max_sm_mhz if writing else m.idle_sm_mhz
            st.sm_act = 1.0 * u if writing else 0.0
            st.pcie_tx = (5.0e6 + 7.0e6 * u) if writing else 1.0e4 * u
            st.pcie_rx = 2.0e4 * u
        if st.util == 0.0:
            st.reasons |= R.GPU_IDLE
        return st

    def idle_temperature(self, g: int) -> float:
        """Steady temperature of GPU ``g`` at its idle power (C): the start condition."""
        return self.ambient_c[g] + self.c_per_w[g] * self.idle_w[g]

