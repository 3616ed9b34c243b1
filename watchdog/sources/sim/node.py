"""The simulated node's physics and counters, advanced on a fixed 1 s grid.

Fast quantities (util, power, clocks, limiter bits, memory) are pure functions of
``(seed, gpu, t)`` (see ``job.py`` and ``faults.py``). Slow ones integrate over time:
temperature follows power through a first-order thermal model
(``dT/dt = (ambient + c * P - T) / tau``), and energy and clock-limiter time are
integrals. They are stepped on a grid anchored at the node's start (step ``DT`` s), and
a reading at ``t`` interpolates exactly from the last grid point, so the state at ``t``
is the same whether the node is sampled every 0.1 s, 1 s or 5 s.

The thermal controller is the GPU's own: at the max operating temperature SW thermal
slowdown (0x20) engages and power is pulled down to what holds the die just above the
slowdown threshold; at the slowdown threshold HW thermal slowdown (0x40) is reported with
HW slowdown (0x8); the hardware limiter also caps the overshoot that a 1 s step would
otherwise allow. A healthy GPU never gets there; the ``thermal_throttle`` fault raises
the thermal resistance until it does.
"""

from __future__ import annotations

import math

from watchdog import reasons as R
from watchdog.sources.sim import noise
from watchdog.sources.sim.faults_base import Fault
from watchdog.sources.sim.job import GpuState, TrainingJob

DT = 1.0  # grid step, s
ECC_BUCKET_S = 3600.0  # at most one corrected ECC error per GPU per bucket
_S_ECC, _S_REPLAY, _S_ECC_BASE, _S_HOLD = 201, 202, 203, 204


class SimNode:
    """Physics and counters of ``job.n`` GPUs; times are seconds since start."""

    def __init__(self, job: TrainingJob, faults: list[Fault]) -> None:
        self.job = job
        self.model = job.model
        self.faults = faults
        n = job.n
        self.k = 0  # grid index the slow state below belongs to
        # HW thermal slowdown acts within milliseconds, far inside one grid step: the die
        # cannot overshoot the slowdown threshold by more than this between two steps.
        self.cap_c = job.model.temp_slowdown_c + 1.5
        self.temp = [job.idle_temperature(g) for g in range(n)]
        self.energy = list(job.energy_base)  # J since the driver loaded
        self.v_power = [0.0] * n  # s with SW power cap
        self.v_thermal = [0.0] * n  # s with SW or HW thermal slowdown
        self.v_sync = [0.0] * n  # s with sync boost
        self._grid: list[GpuState] | None = None  # states at grid point self.k
        self._by_gpu = [[f for f in faults if g in f.gpu_set] for g in range(n)]
        self.replay_base = [float(noise.key(job.gpu_seed, _S_REPLAY, g) % 8) for g in range(n)]
        self.ecc_base = [float(noise.key(job.gpu_seed, _S_ECC_BASE, g) % 3) for g in range(n)]
        self._ecc_cum: list[list[int]] = [[0] for _ in range(n)]  # events before bucket b
        self._ecc_at: list[list[float | None]] = [[] for _ in range(n)]  # event time in b

    # --- state at one instant ---------------------------------------------------------

    def evaluate(self, t: float, temps: list[float]) -> list[GpuState]:
        """Every GPU's state at ``t`` given its temperature now (C)."""
        job = self.job
        phase = job.phase(t)
        tk = noise.tick(t)
        out = []
        for g in range(job.n):
            st = job.state(g, t, phase, tk)
            for f in self._by_gpu[g]:
                if f.active(t):
                    f.apply(g, t, st, tk)
            self._physics(g, st, temps[g], tk)
            out.append(st)
        return out

    def _physics(self, g: int, st: GpuState, temp: float, tk: int) -> None:
        """Thermal control and physical bounds (power in [idle, limit], clocks <= max)."""
        m = self.model
        idle = self.job.idle_w[g]
        if temp >= m.temp_max_operating_c - 1.0:
            c = self.job.c_per_w[g] * st.cooling
            p_hold = (m.temp_slowdown_c + 0.3 - self.job.ambient_c[g]) / c
            wobble = noise.unit(self.job.gpu_seed, _S_HOLD, g, tk)
            p_hold = max(idle, p_hold * (0.98 + 0.04 * wobble))
            if st.power > p_hold:
                st.sm_mhz *= max(0.3, (p_hold / st.power) ** 0.7)
                st.power = p_hold
                st.reasons &= ~R.SW_POWER_CAP
            st.reasons |= R.SW_THERMAL
            if temp >= m.temp_slowdown_c - 0.5:
                st.reasons |= R.HW_THERMAL | R.HW_SLOWDOWN
        st.power = min(max(st.power, idle), m.power_limit_w)
        st.sm_mhz = min(max(st.sm_mhz, m.idle_sm_mhz), m.max_sm_mhz)
        st.util = min(max(st.util, 0.0), 100.0)
        st.mem_used = min(max(st.mem_used, 0.0), m.memory_total_mib)

    def t_ss(self, g: int, st: GpuState) -> float:
        """Steady-state temperature (C) GPU ``g`` tends to in state ``st``."""
        return self.job.ambient_c[g] + self.job.c_per_w[g] * st.cooling * st.power

    # --- the grid ---------------------------------------------------------------------

    def grid_states(self) -> list[GpuState]:
        """States at the current grid point (computed once per point)."""
        if self._grid is None:
            self._grid = self.evaluate(self.k * DT, self.temp)
        return self._grid

    def advance_to(self, k_target: int) -> None:
        """Step the slow state from grid point ``self.k`` to ``k_target``."""
        while self.k < k_target:
            sts = self.grid_states()
            for g, st in enumerate(sts):
                tss = self.t_ss(g, st)
                self.temp[g] = min(self.cap_c, tss + (self.temp[g] - tss)
                                   * math.exp(-DT / st.tau_s))
                self.energy[g] += st.power * DT
                if st.reasons & R.SW_POWER_CAP:
                    self.v_power[g] += DT
                if st.reasons & R.THERMAL:
                    self.v_thermal[g] += DT
                if st.reasons & R.SYNC_BOOST:
                    self.v_sync[g] += DT
            self.k += 1
            self._grid = None

    def at(self, t: float) -> tuple[list[GpuState], list[tuple[float, float, float, float, float]]]:
        """States at ``t`` and, per GPU, ``(temp, energy, v_power, v_thermal, v_sync)``."""
        k = math.floor(t / DT + 1e-9)
        if k < self.k:
            raise ValueError(f"simulated time went backwards: t={t:.3f}s after grid "
                             f"point {self.k * DT:.0f}s")
        self.advance_to(k)
        grid = self.grid_states()
        frac = t - k * DT
        if frac < 1e-9:
            slow = [(self.temp[g], self.energy[g], self.v_power[g], self.v_thermal[g],
                     self.v_sync[g]) for g in range(self.job.n)]
            return grid, slow
        temps = []
        slow = []
        for g, st in enumerate(grid):
            tss = self.t_ss(g, st)
            temp = min(self.cap_c, tss + (self.temp[g] - tss) * math.exp(-frac / st.tau_s))
            temps.append(temp)
            slow.append((temp, self.energy[g] + st.power * frac,
                         self.v_power[g] + (frac if st.reasons & R.SW_POWER_CAP else 0.0),
                         self.v_thermal[g] + (frac if st.reasons & R.THERMAL else 0.0),
                         self.v_sync[g] + (frac if st.reasons & R.SYNC_BOOST else 0.0)))
        return self.evaluate(t, temps), slow

    # --- counters that are pure functions of time --------------------------------------

    def ecc_corrected(self, g: int, t: float) -> float:
        """Corrected ECC errors by ``t``: base + about one per GPU every four hours."""
        b = int(t // ECC_BUCKET_S)
        cum = self._ecc_cum[g]
        when = self._ecc_at[g]
        seed = self.job.gpu_seed
        while len(cum) <= b + 1:  # per bucket: the event time or None, cumulative counts
            i = len(cum) - 1
            at = None
            if noise.unit(seed, _S_ECC, g, i) < 0.25:
                at = i * ECC_BUCKET_S + noise.uniform(0.0, ECC_BUCKET_S, seed, _S_ECC + 1, g, i)
            when.append(at)
            cum.append(cum[-1] + (at is not None))
        at = when[b]
        return self.ecc_base[g] + cum[b] + (at is not None and t >= at)
